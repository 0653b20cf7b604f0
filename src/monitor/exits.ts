/**
 * Container exits as conmon records them: `<exit dir>/<id>` holds the exit code as text and its mtime
 * is the finish time; `<persist dir>/oom` (and `<bundle>/oom`) exists when the kernel OOM-killed it.
 * conmon writes the exit file atomically (a temp file `<id>.XXXXXX` renamed over `<id>`), and keeps
 * doing so while Stove is down, so exits are both watched live and read back at start.
 */
import { watch, type FSWatcher } from 'node:fs';
import { mkdir, open, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { messageOf } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import { poll } from '../common/poll.js';

/** One recorded exit. */
export interface ExitRecord {
  id: string;
  /** The process's exit status; 128 + signal when a signal killed it (137 = SIGKILL). */
  exitCode: number;
  /** When conmon wrote the exit file, in ns since the epoch. */
  finishedAtNs: bigint;
}

/** CRI `reason` for a finished container. */
export type ExitReason = 'Completed' | 'Error' | 'OOMKilled';

/** An exit file holds a decimal status; more than this is not conmon's. */
const EXIT_FILE_MAX = 64;

/** How long a removed exit file's time is kept, so a read that opened it before the removal is not a new exit. */
const GONE_KEEP_MS = 60_000;

/** conmon's temp names while it writes an exit file atomically (g_file_set_contents). */
const TEMP_NAME = /\.[A-Za-z0-9]{6}$/;

/** True for names in the exit dir that are conmon's temp files or otherwise not container IDs. */
function isTempName(name: string): boolean {
  return name.startsWith('.') || TEMP_NAME.test(name);
}

/** Reads `<exitsDir>/<id>`; undefined when there is no (complete) exit file. */
export async function readExit(exitsDir: string, id: string): Promise<ExitRecord | undefined> {
  const path = join(exitsDir, id);
  let file;
  try {
    file = await open(path, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  try {
    // Code and time from one open file: by path, a file renamed over this one in between would pair
    // one file's code with the other's time.
    const info = await file.stat({ bigint: true });
    if (!info.isFile()) return undefined;
    const buf = Buffer.alloc(EXIT_FILE_MAX);
    const { bytesRead } = await file.read(buf, 0, buf.length, 0);
    const exitCode = Number.parseInt(buf.toString('utf8', 0, bytesRead).trim(), 10);
    if (!Number.isInteger(exitCode)) return undefined;
    return { id, exitCode, finishedAtNs: info.mtimeNs };
  } finally {
    await file.close();
  }
}

/**
 * Waits up to `timeoutMs` for the exit file (runc can report `stopped` a moment before conmon has
 * written it; CRI-O waits the same way). Undefined when it never appears.
 */
export async function waitForExit(exitsDir: string, id: string, timeoutMs = 5000): Promise<ExitRecord | undefined> {
  return poll(() => readExit(exitsDir, id), { timeoutMs, intervalMs: 5, maxIntervalMs: 50 });
}

/** Every exit file in the dir, for recovery at start. */
export async function listExits(exitsDir: string): Promise<ExitRecord[]> {
  let names: string[];
  try {
    names = await readdir(exitsDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const records = await Promise.all(names.filter((n) => !isTempName(n)).map((n) => readExit(exitsDir, n)));
  return records.filter((r): r is ExitRecord => r !== undefined);
}

/** True when conmon recorded an OOM kill in the container's persist dir (or bundle). */
export async function wasOomKilled(...dirs: string[]): Promise<boolean> {
  for (const dir of dirs) {
    try {
      await stat(join(dir, 'oom'));
      return true;
    } catch {
      // not in this one
    }
  }
  return false;
}

/** The CRI reason for an exit: OOMKilled wins, then 0 is Completed and anything else Error. */
export function exitReason(exitCode: number, oomKilled: boolean): ExitReason {
  if (oomKilled) return 'OOMKilled';
  return exitCode === 0 ? 'Completed' : 'Error';
}

export interface ExitWatcherOptions {
  exitsDir: string;
  /**
   * Called once per exit file that appears. One that throws is logged and called again with back-off
   * until it succeeds or the exit file is gone (the container was removed).
   */
  onExit: (record: ExitRecord) => void | Promise<void>;
  log: Logger;
  /** Rescan the dir this often as a safety net for missed inotify events (ms; default 10 s; 0 = never). */
  rescanMs?: number;
  /** Back-off between calls of a failing handler: doubles from `initialMs` up to `maxMs` (default 1 s, 5 min, as containerd's event monitor). */
  retry?: { initialMs: number; maxMs: number };
}

/** containerd's `backOffInitDuration` and `backOffMaxDuration` (internal/cri/server/events.go). */
const DEFAULT_RETRY = { initialMs: 1000, maxMs: 5 * 60_000 };

/** A failed handler call waiting for its next attempt. */
interface PendingRetry {
  finishedAtNs: bigint;
  attempt: number;
  timer: NodeJS.Timeout;
}

/**
 * Watches the exit dir and reports each new exit file within milliseconds (inotify). Exit files that
 * already exist when it starts are reported only with `emitExisting`; otherwise read them with
 * `readExit`/`listExits`. Start the watcher before reading them back so nothing falls in between
 * (a consumer may then see the same exit twice and must ignore the repeat). An exit file that goes
 * away (its container was removed) is forgotten, so a later file of that name is reported again.
 */
export class ExitWatcher {
  private watcher: FSWatcher | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** id → mtime of the exit file already reported, so repeated events report once. */
  private readonly seen = new Map<string, bigint>();
  /** id → mtime of a reported exit file since removed, and when: a late read of that file is no new exit. */
  private readonly gone = new Map<string, { finishedAtNs: bigint; atMs: number }>();
  /** id → the next call of a handler that failed for that exit. */
  private readonly retries = new Map<string, PendingRetry>();

  constructor(private readonly options: ExitWatcherOptions) {}

  /** Starts watching (creating the dir if needed). */
  async start(opts: { emitExisting?: boolean } = {}): Promise<void> {
    if (this.watcher) return;
    await mkdir(this.options.exitsDir, { recursive: true, mode: 0o700 });
    this.watcher = watch(this.options.exitsDir, { persistent: false }, (_event, name) => {
      if (name) void this.check(String(name));
    });
    this.watcher.on('error', (err) => this.options.log.error('exit dir watch failed', { dir: this.options.exitsDir, error: messageOf(err) }));
    const existing = await listExits(this.options.exitsDir);
    for (const record of existing) {
      if (opts.emitExisting) await this.report(record);
      else this.seen.set(record.id, record.finishedAtNs);
    }
    const rescanMs = this.options.rescanMs ?? 10_000;
    if (rescanMs > 0) {
      this.timer = setInterval(() => void this.rescan(), rescanMs);
      this.timer.unref();
    }
  }

  /** Stops watching; pending retries are dropped (start-up reads the exit files back). */
  stop(): void {
    this.watcher?.close();
    this.watcher = undefined;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    for (const retry of this.retries.values()) clearTimeout(retry.timer);
    this.retries.clear();
  }

  private async check(name: string): Promise<void> {
    if (isTempName(name)) return;
    const before = this.seen.get(name);
    try {
      const record = await readExit(this.options.exitsDir, name);
      if (record) await this.report(record);
      else this.forget(name, before);
    } catch (err) {
      this.options.log.warn('cannot read exit file', { id: name, error: messageOf(err) });
    }
  }

  private async rescan(): Promise<void> {
    try {
      const before = new Map(this.seen);
      const present = await listExits(this.options.exitsDir);
      for (const record of present) await this.report(record);
      // Files removed while an inotify event was lost are forgotten here.
      const ids = new Set(present.map((r) => r.id));
      for (const [id, finishedAtNs] of before) {
        if (!ids.has(id) && !(await readExit(this.options.exitsDir, id))) this.forget(id, finishedAtNs);
      }
    } catch (err) {
      this.options.log.warn('exit dir rescan failed', { dir: this.options.exitsDir, error: messageOf(err) });
    }
  }

  /**
   * The exit file is gone: its container was removed, so nothing is left to report or retry. `seenAs`:
   * what was reported before the file was found missing; a newer report since then stands.
   */
  private forget(id: string, seenAs: bigint | undefined): void {
    if (this.seen.get(id) !== seenAs) return;
    this.seen.delete(id);
    const now = Date.now();
    for (const [gid, g] of this.gone) if (now - g.atMs > GONE_KEEP_MS) this.gone.delete(gid);
    if (seenAs !== undefined) this.gone.set(id, { finishedAtNs: seenAs, atMs: now });
    const retry = this.retries.get(id);
    if (retry) clearTimeout(retry.timer);
    this.retries.delete(id);
  }

  private async report(record: ExitRecord, attempt = 1): Promise<void> {
    if (attempt === 1) {
      // A read that opened an older file (replaced or removed since) is not a new exit.
      const seen = this.seen.get(record.id) ?? this.gone.get(record.id)?.finishedAtNs;
      if (seen !== undefined && record.finishedAtNs <= seen) return;
    }
    this.gone.delete(record.id);
    this.seen.set(record.id, record.finishedAtNs);
    try {
      await this.options.onExit(record);
    } catch (err) {
      this.options.log.error('exit handler failed', { id: record.id, attempt, error: messageOf(err) });
      this.scheduleRetry(record, attempt);
    }
  }

  /** The next call after `attempt` failed, unless the file changed (a newer exit is reported on its own). */
  private scheduleRetry(record: ExitRecord, attempt: number): void {
    if (!this.watcher || this.seen.get(record.id) !== record.finishedAtNs) return;
    const { initialMs, maxMs } = this.options.retry ?? DEFAULT_RETRY;
    const delayMs = Math.min(maxMs, initialMs * 2 ** (attempt - 1));
    const timer = setTimeout(() => void this.retry(record.id, attempt + 1), delayMs);
    timer.unref();
    this.retries.set(record.id, { finishedAtNs: record.finishedAtNs, attempt: attempt + 1, timer });
  }

  private async retry(id: string, attempt: number): Promise<void> {
    const pending = this.retries.get(id);
    if (pending?.attempt !== attempt) return;
    this.retries.delete(id);
    let record: ExitRecord | undefined;
    try {
      record = await readExit(this.options.exitsDir, id);
    } catch (err) {
      this.options.log.warn('cannot read exit file', { id, error: messageOf(err) });
      this.scheduleRetry({ id, exitCode: 0, finishedAtNs: pending.finishedAtNs }, attempt);
      return;
    }
    if (!record) return this.forget(id, pending.finishedAtNs);
    // A file rewritten meanwhile is a new exit, which its own event reports.
    if (record.finishedAtNs !== pending.finishedAtNs) return;
    await this.report(record, attempt);
  }
}
