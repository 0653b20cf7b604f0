/** Per-exec scratch directories: the process spec, conmon's pid file, log and ctl FIFO for one exec. */
import { randomBytes } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * The OCI `process` object of an exec: the container's own `spec.process` with `args` replaced
 * (user, env, cwd, capabilities, rlimits, apparmor/selinux labels and noNewPrivileges carry over).
 */
export interface OciProcess {
  args: string[];
  terminal?: boolean;
  [field: string]: unknown;
}

/** The process spec for an exec: `base` with new args and the given terminal setting. */
export function execProcess(base: Record<string, unknown>, args: string[], terminal: boolean): OciProcess {
  const proc: OciProcess = { ...structuredClone(base), args: [...args], terminal };
  // A console size belongs to the container's first terminal, not to an exec's.
  delete proc['consoleSize'];
  return proc;
}

/** A fresh directory for one exec session. */
export interface ExecDir {
  /** Random session ID (also the attach link name for streaming execs). */
  id: string;
  dir: string;
  processFile: string;
  pidFile: string;
  logFile: string;
  remove(): Promise<void>;
}

/** Creates `<execDir>/<random>` holding process.json. */
export async function createExecDir(execDir: string, proc: OciProcess): Promise<ExecDir> {
  const id = randomBytes(8).toString('hex');
  const dir = join(execDir, id);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const processFile = join(dir, 'process.json');
  await writeFile(processFile, JSON.stringify(proc), { mode: 0o600 });
  return {
    id,
    dir,
    processFile,
    pidFile: join(dir, 'pidfile'),
    logFile: join(dir, 'log'),
    remove: () => rm(dir, { recursive: true, force: true }),
  };
}
