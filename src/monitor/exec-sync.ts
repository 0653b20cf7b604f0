/**
 * ExecSync through conmon, as CRI-O does: `conmon -e --sync --exec-process-spec … -l <tmp log> [-T n]`.
 * conmon runs `runc exec`, kills the process group after the timeout, writes the output in the CRI
 * log format and reports `{"exit_code": N}` (or `{"exit_code": -1, "message": …}`) on the sync pipe.
 */
import { readFile, stat } from 'node:fs/promises';
import { StoveError } from '../common/errors.js';
import { runtimeErrorKind, runtimeMessage, type Runc } from '../runtime/runc.js';
import { detachConmon, releaseConmon, spawnConmon, type ConmonConfig } from './conmon.js';
import { parseCriLog } from './cri-log.js';
import { MonitorError } from './errors.js';
import { createExecDir, type ExecDir, type OciProcess } from './exec-dir.js';
import { signalProcess } from './process.js';

/** At most this much output is returned (stdout + stderr together), as in CRI-O. */
export const EXEC_SYNC_MAX_OUTPUT = 16 * 1024 * 1024;
/**
 * conmon's limit counts log bytes, timestamps and tags included (~37 bytes per line), so the log may
 * grow past the output cap; twice the cap keeps the full 16 MiB for lines of typical length.
 */
const EXEC_SYNC_MAX_LOG = 2 * EXEC_SYNC_MAX_OUTPUT;
/** conmon's message when `-T` expired. */
const TIMED_OUT = 'command timed out';

/** What an ExecSync produced. */
export interface ExecSyncResult {
  stdout: Buffer;
  stderr: Buffer;
  exitCode: number;
  /** True when output beyond EXEC_SYNC_MAX_OUTPUT was dropped. */
  truncated: boolean;
}

export interface ExecSyncOptions {
  /** Container name for conmon's messages (the ID when omitted). */
  name?: string;
}

/** conmon's command line for an ExecSync (unit-tested). */
export function execSyncArgs(
  config: ConmonConfig,
  runtime: Runc,
  containerId: string,
  dir: Pick<ExecDir, 'pidFile' | 'logFile' | 'processFile'>,
  tty: boolean,
  timeoutSeconds: number,
  name?: string,
): string[] {
  const args = [
    '-c', containerId,
    '-n', name || containerId,
    '-r', runtime.binary,
    '-p', dir.pidFile,
    '-e',
    '-l', `k8s-file:${dir.logFile}`,
    '--socket-dir-path', config.attachDir,
    '--log-level', config.logLevel ?? 'info',
    '--sync',
    '--log-global-size-max', String(EXEC_SYNC_MAX_LOG),
  ];
  if (tty) args.push('-t');
  if (timeoutSeconds > 0) args.push('-T', String(timeoutSeconds));
  args.push('--exec-process-spec', dir.processFile);
  for (const arg of runtime.globalArgs()) args.push('--runtime-arg', arg);
  return args;
}

/**
 * Runs `proc` in the container and waits for it. A timeout (`timeoutSeconds` > 0) is a
 * DeadlineExceeded error with the message `command timed out`; a process that could not be started
 * is an error with the runtime's message; any exit code of the process itself is a result.
 */
export async function execSync(
  config: ConmonConfig,
  runtime: Runc,
  containerId: string,
  proc: OciProcess,
  timeoutSeconds: number,
  options: ExecSyncOptions = {},
): Promise<ExecSyncResult> {
  const dir = await createExecDir(config.execDir, proc);
  try {
    const args = execSyncArgs(config, runtime, containerId, dir, proc.terminal === true, timeoutSeconds, options.name);
    const conmon = await spawnConmon(config, args, dir.dir);
    let exit;
    try {
      releaseConmon(conmon);
      exit = await waitWithSafetyNet(conmon.exited, timeoutSeconds, () => signalProcess(conmon.child.pid!, 'SIGKILL'));
      const message = await conmon.sync.next(1000, () => new Error('no exit code'));
      const result = await execResult(containerId, dir, message, exit, conmon.output());
      if (result.truncated) {
        config.log.warn('exec output truncated', { container: containerId, args: proc.args, limitBytes: EXEC_SYNC_MAX_OUTPUT });
      }
      return result;
    } catch (err) {
      if (err instanceof StoveError) throw err;
      throw new MonitorError('Internal', `failed to exec in container "${containerId}": ${(err as Error).message}`, containerId, { cause: err });
    } finally {
      detachConmon(conmon);
    }
  } finally {
    await dir.remove();
  }
}

/** Waits for conmon; if it outlives its own timeout by far, kills it (a hung runtime). */
async function waitWithSafetyNet<T>(exited: Promise<T>, timeoutSeconds: number, kill: () => void): Promise<T> {
  if (timeoutSeconds <= 0) return exited;
  const timer = setTimeout(kill, (timeoutSeconds + 30) * 1000);
  try {
    return await exited;
  } finally {
    clearTimeout(timer);
  }
}

/** Turns conmon's report and the log into a result or an error. */
async function execResult(
  containerId: string,
  dir: ExecDir,
  message: { value: number; message?: string } | undefined,
  exit: { code: number | null; signal: NodeJS.Signals | null },
  conmonOutput: string,
): Promise<ExecSyncResult> {
  if (!message) {
    const status = exit.code ?? exit.signal;
    throw new MonitorError('Internal', `failed to exec in container "${containerId}": ${conmonOutput || 'conmon reported no exit code'} (conmon exit status ${status})`, containerId);
  }
  if (message.value === -1 && message.message === TIMED_OUT) {
    throw new MonitorError('DeadlineExceeded', TIMED_OUT, containerId);
  }
  if (message.value < 0) {
    const why = runtimeMessage(message.message ?? '') || conmonOutput || `exit code ${message.value}`;
    throw new MonitorError(runtimeErrorKind(why), `failed to exec in container "${containerId}": ${why}`, containerId);
  }
  const log = await readLog(dir.logFile);
  const parsed = parseCriLog(log, EXEC_SYNC_MAX_OUTPUT);
  // conmon stops logging at the global limit, so a log that reached it lost output.
  const truncated = parsed.truncated || log.length >= EXEC_SYNC_MAX_LOG;
  return { stdout: parsed.stdout, stderr: parsed.stderr, exitCode: message.value, truncated };
}

async function readLog(path: string): Promise<Buffer> {
  try {
    if ((await stat(path)).size === 0) return Buffer.alloc(0);
    return await readFile(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return Buffer.alloc(0);
    throw err;
  }
}
