/**
 * Pull progress: each pull logs its layers (bytes, time, rate) and keeps a small JSON snapshot under
 * `<state>/pulls/` that `stove pull` reads to draw its progress bars while the PullImage call runs.
 */
import { createHash } from 'node:crypto';
import { mkdir, rename, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../common/logger.js';
import { messageOf } from '../common/errors.js';

export type LayerState = 'waiting' | 'downloading' | 'unpacking' | 'done' | 'present' | 'failed';

export interface LayerProgress {
  digest: string;
  size: number;
  done: number;
  state: LayerState;
}

export interface PullSnapshot {
  reference: string;
  state: 'resolving' | 'pulling' | 'done' | 'failed';
  layers: LayerProgress[];
  startedAt: number;
  updatedAt: number;
  imageId?: string;
  error?: string;
}

/** Where the snapshot for a normalised reference lives. */
export function progressFile(stateDir: string, reference: string): string {
  return join(stateDir, 'pulls', createHash('sha256').update(reference).digest('hex').slice(0, 24) + '.json');
}

const WRITE_INTERVAL_MS = 150;

export class PullProgress {
  private readonly snapshot: PullSnapshot;
  private readonly layers = new Map<string, LayerProgress & { started?: number }>();
  private timer?: NodeJS.Timeout;
  private writing = Promise.resolve();
  private dirty = false;

  constructor(
    reference: string,
    private readonly file: string | undefined,
    private readonly log: Logger,
  ) {
    this.snapshot = { reference, state: 'resolving', layers: [], startedAt: Date.now(), updatedAt: Date.now() };
    this.schedule();
  }

  setLayers(layers: { digest: string; size: number }[]): void {
    this.snapshot.state = 'pulling';
    for (const l of layers) {
      if (this.layers.has(l.digest)) continue;
      const p = { digest: l.digest, size: l.size, done: 0, state: 'waiting' as LayerState };
      this.layers.set(l.digest, p);
      this.snapshot.layers.push(p);
    }
    this.schedule();
  }

  state(digest: string, state: LayerState): void {
    const p = this.layers.get(digest);
    if (!p) return;
    if (state === 'present' && p.state === 'done') return;
    if (state === 'downloading' && !p.started) p.started = performance.now();
    if (state === 'present') p.done = p.size;
    if (state === 'done') {
      p.done = p.size;
      const seconds = p.started ? (performance.now() - p.started) / 1000 : 0;
      this.log.info('layer pulled', {
        reference: this.snapshot.reference,
        digest,
        bytes: p.size,
        seconds: +seconds.toFixed(3),
        mbPerSecond: seconds > 0 ? +(p.size / 1e6 / seconds).toFixed(1) : undefined,
      });
    }
    p.state = state;
    this.schedule();
  }

  bytes(digest: string, n: number): void {
    const p = this.layers.get(digest);
    if (!p) return;
    p.done += n;
    this.schedule();
  }

  /** Logs the pull and writes its final snapshot; resolves once written (or failed to be). */
  finish(imageId: string): Promise<void> {
    const seconds = (Date.now() - this.snapshot.startedAt) / 1000;
    const downloaded = this.snapshot.layers.filter((l) => l.state === 'done').reduce((a, l) => a + l.size, 0);
    this.log.info('image pulled', {
      reference: this.snapshot.reference,
      imageId,
      layers: this.snapshot.layers.length,
      layersPresent: this.snapshot.layers.filter((l) => l.state === 'present').length,
      bytesDownloaded: downloaded,
      seconds: +seconds.toFixed(3),
      mbPerSecond: seconds > 0 && downloaded > 0 ? +(downloaded / 1e6 / seconds).toFixed(1) : undefined,
    });
    this.snapshot.state = 'done';
    this.snapshot.imageId = imageId;
    return this.flush(true);
  }

  /** Records the failure in the snapshot; resolves once written (or failed to be). */
  fail(err: unknown): Promise<void> {
    this.snapshot.state = 'failed';
    this.snapshot.error = messageOf(err);
    for (const l of this.snapshot.layers) if (l.state !== 'done' && l.state !== 'present') l.state = 'failed';
    return this.flush(true);
  }

  private schedule(): void {
    this.dirty = true;
    // A pull that ended keeps the snapshot it ended with: a layer download it shared with another
    // image's pull goes on after this pull's callers left, and still reports here.
    if (!this.file || this.timer || this.snapshot.state === 'done' || this.snapshot.state === 'failed') return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush(false); // never rejects: a failed write is logged
    }, WRITE_INTERVAL_MS);
    this.timer.unref();
  }

  /** Writes the snapshot after any write before it; the promise settles when this one is done. */
  private flush(final: boolean): Promise<void> {
    if (!this.file) return this.writing;
    if (final && this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (!this.dirty && !final) return this.writing;
    this.dirty = false;
    this.snapshot.updatedAt = Date.now();
    const text = JSON.stringify(this.snapshot);
    const file = this.file;
    this.writing = this.writing.then(async () => {
      try {
        await mkdir(join(file, '..'), { recursive: true, mode: 0o700 });
        const tmp = `${file}.${process.pid}.tmp`;
        await writeFile(tmp, text).then(
          () => rename(tmp, file),
          (err: unknown) => unlink(tmp).catch(() => {}).then(() => Promise.reject(err)),
        );
      } catch (err) {
        this.log.debug('writing pull progress failed', { file, error: messageOf(err) });
      }
    });
    return this.writing;
  }
}
