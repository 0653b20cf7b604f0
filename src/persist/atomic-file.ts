/**
 * Crash-safe file writes: write a temp file in the same directory, fsync it, rename it over the target,
 * fsync the directory. A reader sees the old content or the new, never half of either.
 *
 * `durable: false` skips both fsyncs: the rename still makes the write atomic, and a killed daemon's
 * writes stay in the page cache, so only a power loss or kernel crash can lose it. For files whose
 * content recovery can derive from something durable (say why where it is used).
 */
import { readFileSync } from 'node:fs';
import { open, rename, mkdir, unlink, readFile } from 'node:fs/promises';
import { dirname, basename, join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { parseJson, stringifyJson } from '../common/json.js';

export interface WriteOptions {
  /** fsync the file and its directory (default true). */
  durable?: boolean;
}

/** Atomically replaces `path` with `data`. */
export async function writeFileAtomic(path: string, data: string | Uint8Array, mode = 0o600, options: WriteOptions = {}): Promise<void> {
  const durable = options.durable ?? true;
  const dir = dirname(path);
  // Records are root's alone (persist/tree-modes.ts).
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const tmp = join(dir, `.${basename(path)}.${randomBytes(6).toString('hex')}.tmp`);
  // A failed write (ENOSPC, EIO) leaves no temp file behind, and the old content in place.
  try {
    const fh = await open(tmp, 'wx', mode);
    try {
      await fh.writeFile(data);
      if (durable) await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (err) {
    await unlink(tmp).catch(() => {});
    throw err;
  }
  if (!durable) return;
  const dh = await open(dir, 'r');
  try {
    await dh.sync();
  } finally {
    await dh.close();
  }
}

/** Atomically writes a value as JSON (bigint-safe). */
export async function writeJsonAtomic(path: string, value: unknown, options?: WriteOptions): Promise<void> {
  await writeFileAtomic(path, stringifyJson(value, 2) + '\n', 0o600, options);
}

/** Reads JSON written by writeJsonAtomic; undefined when the file does not exist. */
export async function readJsonFile<T>(path: string): Promise<T | undefined> {
  try {
    return parseJson<T>(await readFile(path, 'utf8'));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/**
 * readJsonFile without the thread pool, for small files read on a status path: an async read is four
 * round trips through libuv's pool, which queue behind the fsyncs of concurrent pod and container
 * lifecycles; these syscalls on a page-cached file take microseconds.
 */
export function readJsonFileSync<T>(path: string): T | undefined {
  try {
    return parseJson<T>(readFileSync(path, 'utf8'));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}
