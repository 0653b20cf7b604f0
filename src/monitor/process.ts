/**
 * Process identity checks for processes Stove does not parent (conmon is re-parented to init): a pid
 * plus its /proc start time identifies one process even after the pid has been reused.
 */
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';

/**
 * The process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22), or undefined when
 * no such process exists.
 */
export async function processStartTime(pid: number): Promise<bigint | undefined> {
  return procStat(pid)?.startTime;
}

/** True while the process with this pid is the one that had `startTime` (and is not a zombie). */
export async function isSameProcessAlive(pid: number, startTime: bigint): Promise<boolean> {
  const stat = procStat(pid);
  return stat !== undefined && stat.startTime === startTime && stat.state !== 'Z';
}

/**
 * State and start time from /proc/<pid>/stat, read synchronously: the kernel makes the text on the
 * spot and never blocks, and status RPCs that ask this on every call are cheaper without four thread
 * pool round trips. Undefined when no such process exists.
 */
function procStat(pid: number): { state: string; startTime: bigint } | undefined {
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // The command name (field 2) may contain spaces and parentheses: count fields after the last ')'.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const startTime = rest[22 - 3];
  return startTime === undefined ? undefined : { state: rest[0]!, startTime: BigInt(startTime) };
}

/** Reads a pid file as written by runc (`--pid-file`) or conmon (`-P`); undefined if absent or empty. */
export async function readPidFile(path: string): Promise<number | undefined> {
  try {
    const pid = Number.parseInt((await readFile(path, 'utf8')).trim(), 10);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** Sends a signal, ignoring a process that is already gone. */
export function signalProcess(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}
