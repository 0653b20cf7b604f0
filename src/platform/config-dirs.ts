/**
 * Configuration files that other software drops into directories (CDI specs, OCI hook files), read
 * again when they change without inotify: each scan lists the dirs and stats their files, and a file
 * is loaded again only when its inode, size or mtime moved. Cheap enough to run before every use,
 * and never misses a change the way a missed or overflowed watch event can.
 */
import { open, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { messageOf } from '../common/errors.js';
import type { Logger } from '../common/logger.js';

export interface ConfigDirFile<T> {
  name: string;
  path: string;
  /** The index of its dir: later dirs have higher priority. */
  priority: number;
  loaded: T;
}

export interface ConfigDirsOptions<T> {
  /** In increasing priority. */
  dirs: readonly string[];
  /** Which file names are config files. */
  accept(name: string): boolean;
  /** Loads one file; never throws (a bad file is a value the caller reports). */
  load(path: string): Promise<T>;
  log: Logger;
}

export interface ConfigDirsScan<T> {
  /** Per dir in order, then by name. */
  files: ConfigDirFile<T>[];
  /** Whether any file was added, removed or changed since the previous scan. */
  changed: boolean;
}

export class ConfigDirs<T> {
  private known = new Map<string, { signature: string; loaded: T }>();
  private signature: string | undefined;
  private scanning?: Promise<ConfigDirsScan<T>>;
  private queued?: Promise<ConfigDirsScan<T>>;

  constructor(private readonly options: ConfigDirsOptions<T>) {}

  /**
   * Lists and (re)loads the files. A scan always starts after the call: while one runs (it may have
   * passed a file the caller just wrote), callers share one more that starts when it ends.
   */
  scan(): Promise<ConfigDirsScan<T>> {
    if (!this.scanning) {
      this.scanning = this.doScan().finally(() => {
        this.scanning = undefined;
      });
      return this.scanning;
    }
    this.queued ??= this.scanning
      .catch(() => undefined)
      .then(() => {
        this.queued = undefined;
        return this.scan();
      });
    return this.queued;
  }

  private async doScan(): Promise<ConfigDirsScan<T>> {
    const files: ConfigDirFile<T>[] = [];
    const next = new Map<string, { signature: string; loaded: T }>();
    const parts: string[] = [];
    for (const [priority, dir] of this.options.dirs.entries()) {
      for (const name of await this.names(dir)) {
        const path = join(dir, name);
        let st;
        try {
          st = await stat(path, { bigint: true });
        } catch {
          continue; // removed since the listing
        }
        // Only regular files: opening a FIFO would block a libuv worker until some writer came.
        if (!st.isFile()) continue;
        const signature = `${st.ino}:${st.size}:${st.mtimeNs}`;
        const old = this.known.get(path);
        const loaded = old?.signature === signature ? old.loaded : await this.options.load(path);
        next.set(path, { signature, loaded });
        files.push({ name, path, priority, loaded });
        parts.push(`${path}\0${signature}`);
      }
    }
    this.known = next;
    const signature = parts.join('\n');
    const changed = signature !== this.signature;
    this.signature = signature;
    return { files, changed };
  }

  /** The accepted names directly in `dir`, sorted; none when it does not exist. */
  private async names(dir: string): Promise<string[]> {
    try {
      return (await readdir(dir)).filter((n) => this.options.accept(n)).sort();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.options.log.warn('config dir unreadable', { dir, error: messageOf(err) });
      return [];
    }
  }
}

/** Reads a small file whole, refusing one larger than `max` bytes. */
export async function readSmallFile(path: string, max: number): Promise<string> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(max + 1);
    let total = 0;
    for (;;) {
      const { bytesRead } = await fh.read(buf, total, buf.length - total, total);
      if (bytesRead === 0) break;
      total += bytesRead;
      if (total > max) throw new Error(`larger than ${max} bytes`);
    }
    return buf.subarray(0, total).toString('utf8');
  } finally {
    await fh.close();
  }
}
