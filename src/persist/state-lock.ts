/**
 * One daemon per state dir. Recovery at start-up rewrites records, removes what interrupted creates
 * left and reads exit files: a second daemon doing that under a live one would break its pods. The
 * lock is `<state>/stove.pid`, created exclusively; a file whose process is gone (a SIGKILLed daemon)
 * is taken over.
 */
import { open, readFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { failedPrecondition } from '../common/errors.js';

export interface StateLock {
  readonly path: string;
  release(): Promise<void>;
}

async function liveOwner(path: string): Promise<number | undefined> {
  const pid = Number((await readFile(path, 'utf8').catch(() => '')).trim());
  if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) return undefined;
  try {
    process.kill(pid, 0);
  } catch {
    return undefined;
  }
  // A reused pid belongs to some other program: only another stove daemon holds the lock.
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
  return /stove|main\.js/.test(cmdline) ? pid : undefined;
}

/** Takes the lock on `stateDir`, or fails naming the daemon that holds it. */
export async function lockStateDir(stateDir: string): Promise<StateLock> {
  const path = join(stateDir, 'stove.pid');
  for (let attempt = 0; ; attempt++) {
    try {
      const fh = await open(path, 'wx', 0o644);
      await fh.writeFile(`${process.pid}\n`);
      await fh.close();
      return { path, release: () => unlink(path).catch(() => {}) };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) throw err;
    }
    const owner = await liveOwner(path);
    if (owner !== undefined)
      throw failedPrecondition(`another stove daemon (pid ${owner}) is using the state dir ${stateDir}; stop it or pass --state and --root`);
    await unlink(path).catch(() => {});
  }
}
