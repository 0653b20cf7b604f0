/**
 * Process identity checks for processes Stove does not parent (conmon is re-parented to init): a pid
 * plus its /proc start time identifies one process even after the pid has been reused.
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { readFile } from 'node:fs/promises';

/**
 * The process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22), or undefined when
 * no such process exists.
 */
export async function processStartTime(pid: number): Promise<bigint | undefined> {
  const startTime = procStat(pid)?.startTime;
  return startTime === undefined ? undefined : BigInt(startTime);
}

/** True while the process with this pid is the one that had `startTime` (and is not a zombie). */
export async function isSameProcessAlive(pid: number, startTime: bigint): Promise<boolean> {
  return isLive(procStat(pid), String(startTime));
}

/** The stat of the process that started at `startText`, and not a zombie. */
function isLive(stat: StatFields | undefined, startText: string): boolean {
  return stat !== undefined && stat.startTime === startText && stat.state !== 'Z';
}

/** An fd on /proc/<pid>/<file>, or undefined when there is no such process (or the pid is not one). */
function openProcFile(pid: number, file: 'stat' | 'statm'): number | undefined {
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  try {
    return openSync(`/proc/${pid}/${file}`, 'r');
  } catch {
    return undefined;
  }
}

/**
 * State and start time (as its decimal text) from /proc/<pid>/stat, read synchronously: the kernel
 * makes the text on the spot and never blocks, and status RPCs that ask this on every call are cheaper
 * without four thread pool round trips. Undefined when no such process exists.
 */
function procStat(pid: number): StatFields | undefined {
  const fd = openProcFile(pid, 'stat');
  if (fd === undefined) return undefined;
  try {
    return readStat(fd);
  } finally {
    closeSync(fd);
  }
}

interface StatFields {
  /** Field 3: R, S, D, Z, … */
  state: string;
  /** Field 22, clock ticks since boot, as written (compared as text: no bigint per check). */
  startTime: string;
}

/** One stat line is well under this (52 fields of at most 20 digits and a 64-byte command name). */
const STAT_MAX_BYTES = 2048;
const statBuffer = Buffer.alloc(STAT_MAX_BYTES);

/** Reads a /proc/<pid>/stat fd from offset 0 (pread); undefined once its process is reaped (ESRCH). */
function readStat(fd: number): StatFields | undefined {
  let length: number;
  try {
    length = readSync(fd, statBuffer, 0, STAT_MAX_BYTES, 0);
  } catch {
    return undefined;
  }
  return parseStat(statBuffer.toString('latin1', 0, length));
}

/**
 * The command name (field 2) may contain spaces and parentheses: fields are counted from the last ')'.
 * Walks to field 22 with indexOf instead of splitting the whole line.
 */
export function parseStat(line: string): StatFields | undefined {
  const close = line.lastIndexOf(')');
  if (close < 0) return undefined;
  const stateAt = close + 2;
  let at = stateAt;
  for (let field = 3; field < 22; field++) {
    const space = line.indexOf(' ', at);
    if (space < 0) return undefined;
    at = space + 1;
  }
  const end = line.indexOf(' ', at);
  const startTime = line.slice(at, end < 0 ? line.length : end).trimEnd();
  if (stateAt >= line.length || !/^\d+$/.test(startTime)) return undefined;
  return { state: line[stateAt]!, startTime };
}

/**
 * Liveness of long-lived processes (pause processes, asked on every PodSandboxStatus) through a
 * /proc/<pid>/statm fd kept open per process: one pread per check instead of open, fstat, two reads and
 * close, and of statm rather than stat, which the kernel makes in a third of the time (a status call
 * made this check on every call). The fd names the process it was opened on, never a later one that
 * reuses the pid: once that process is reaped, reads on it fail; a zombie (or an exiting process) has
 * no memory left and reads as all zeros. It is opened on the first check, before the start time is
 * checked (so the process the start time names is the one the fd was opened on), so a restarted daemon
 * reopens them lazily, and closed when a check finds the process dead or by `release` when its owner
 * destroys it.
 */
export class ProcessProbes {
  private readonly held = new Map<number, { startTime: bigint; fd: number }>();

  /** As isSameProcessAlive: same pid and start time, not a zombie. */
  isAlive(pid: number, startTime: bigint): boolean {
    const probe = this.held.get(pid);
    if (probe?.startTime === startTime) {
      if (hasMemory(probe.fd)) return true;
      this.release(pid);
      return false;
    }
    return this.open(pid, startTime);
  }

  /** Closes the fd held for this process, if any. */
  release(pid: number): void {
    const probe = this.held.get(pid);
    if (!probe) return;
    this.held.delete(pid);
    closeSync(probe.fd);
  }

  /** How many fds are held (for tests). */
  get size(): number {
    return this.held.size;
  }

  private open(pid: number, startTime: bigint): boolean {
    const fd = openProcFile(pid, 'statm');
    if (fd === undefined) return false;
    if (!isLive(procStat(pid), String(startTime)) || !hasMemory(fd)) {
      closeSync(fd);
      return false;
    }
    // The pid now names the process asked for, so one held under it before has been reaped.
    this.release(pid);
    this.held.set(pid, { startTime, fd });
    return true;
  }
}

const statmBuffer = Buffer.alloc(64);

/**
 * Whether the process a /proc/<pid>/statm fd was opened on still runs: reads fail once it is reaped
 * (ESRCH), and its first field (total program size in pages) is 0 once it has no memory (a zombie).
 */
function hasMemory(fd: number): boolean {
  let length: number;
  try {
    length = readSync(fd, statmBuffer, 0, statmBuffer.length, 0);
  } catch {
    return false;
  }
  return length > 1 && statmBuffer[0] !== 0x30 /* '0' */;
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
