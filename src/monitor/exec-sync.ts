/**
 * ExecSync through conmon, as CRI-O does: `conmon -e --sync --exec-process-spec … -l <tmp log>`.
 * conmon runs `runc exec`, writes the output in the CRI log format and reports `{"exit_code": N}` (or
 * `{"exit_code": -1, "message": …}`) on the sync pipe.
 *
 * The timeout is enforced here, not by conmon's `-T`: on expiry conmon SIGKILLs only its direct child
 * and exits without reaping it, so the process lingers (at best as a zombie handed to the host's init)
 * after the caller was told it timed out, and a probe that looks right away still sees it. Stove kills
 * the process and everything it started while conmon is still there to reap it, waits for conmon to
 * report the exit, and only then answers DEADLINE_EXCEEDED. conmon's `-T` stays as a backstop (a few
 * seconds later) for a daemon that dies mid-exec.
 */
import { readFile, readdir, stat } from 'node:fs/promises';
import { setTimeout as delay } from 'node:timers/promises';
import { StoveError, messageOf } from '../common/errors.js';
import { pollUntil } from '../common/poll.js';
import { runtimeErrorKind, runtimeMessage, type Runc } from '../runtime/runc.js';
import { detachConmon, releaseConmon, spawnConmon, type ConmonConfig } from './conmon.js';
import { parseCriLog } from './cri-log.js';
import { MonitorError } from './errors.js';
import { createExecDir, type ExecDir, type OciProcess } from './exec-dir.js';
import { isSameProcessAlive, processStartTime, signalProcess } from './process.js';

/** At most this much output is returned (stdout + stderr together), as in CRI-O. */
export const EXEC_SYNC_MAX_OUTPUT = 16 * 1024 * 1024;
/**
 * conmon's limit counts log bytes, timestamps and tags included (~37 bytes per line), so the log may
 * grow past the output cap; twice the cap keeps the full 16 MiB for lines of typical length.
 */
const EXEC_SYNC_MAX_LOG = 2 * EXEC_SYNC_MAX_OUTPUT;
/** conmon's message when `-T` expired (also the message of Stove's own timeout). */
const TIMED_OUT = 'command timed out';
/** conmon's own `-T` fires this long after Stove's timeout: only if Stove is gone. */
const CONMON_TIMEOUT_BACKSTOP_SECONDS = 10;
/** How often the processes of a timed-out exec are killed again (runc may still be starting one). */
const KILL_INTERVAL_MS = 100;
/** How long to wait for killed processes to die. */
const GONE_TIMEOUT_MS = 5000;

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
  /** The caller left: the command is killed as on a timeout, and the error is Cancelled. */
  signal?: AbortSignal;
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
  if (timeoutSeconds > 0) args.push('-T', String(timeoutSeconds + CONMON_TIMEOUT_BACKSTOP_SECONDS));
  args.push('--exec-process-spec', dir.processFile);
  for (const arg of runtime.globalArgs()) args.push('--runtime-arg', arg);
  return args;
}

/**
 * Runs `proc` in the container and waits for it. A timeout (`timeoutSeconds` > 0) is a
 * DeadlineExceeded error with the message `command timed out`; an aborted `options.signal` kills the
 * command the same way and is a Cancelled error; a process that could not be started is an error with
 * the runtime's message; any exit code of the process itself is a result.
 */
export async function execSync(
  config: ConmonConfig,
  runtime: Runc,
  containerId: string,
  proc: OciProcess,
  timeoutSeconds: number,
  options: ExecSyncOptions = {},
): Promise<ExecSyncResult> {
  options.signal?.throwIfAborted();
  const dir = await createExecDir(config.execDir, proc);
  try {
    const args = execSyncArgs(config, runtime, containerId, dir, proc.terminal === true, timeoutSeconds, options.name);
    const conmon = await spawnConmon(config, args, dir.dir);
    let exit;
    const deadline = timeoutSeconds > 0 || options.signal ? new ExecDeadline(conmon.child.pid!, timeoutSeconds, options.signal) : undefined;
    try {
      releaseConmon(conmon);
      exit = await waitWithSafetyNet(conmon.exited, timeoutSeconds, () => signalProcess(conmon.child.pid!, 'SIGKILL'));
      deadline?.stop();
      if (deadline?.killedAny) {
        // conmon reaped the exec'd process before it exited; whatever that process started went to the
        // container's init: wait for all of it to be dead.
        await deadline.waitGone();
        if (deadline.cancelled) throw new MonitorError('Cancelled', `exec in container "${containerId}" cancelled: ${messageOf(options.signal!.reason)}`, containerId);
        throw new MonitorError('DeadlineExceeded', TIMED_OUT, containerId);
      }
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
      deadline?.stop();
      detachConmon(conmon);
    }
  } finally {
    await dir.remove();
  }
}

/**
 * The timeout of one ExecSync, or its caller leaving: then every process below conmon (runc while it
 * starts the process, the process, its children) is SIGKILLed, and again every KILL_INTERVAL_MS until
 * stop().
 */
class ExecDeadline {
  private readonly killed = new Map<number, bigint>();
  private readonly timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private killing = false;
  /** True when the kill came from the signal, not the timeout. */
  cancelled = false;

  constructor(
    private readonly conmonPid: number,
    timeoutSeconds: number,
    private readonly signal?: AbortSignal,
  ) {
    if (timeoutSeconds > 0) this.timer = setTimeout(() => this.expire(), timeoutSeconds * 1000);
    // The caller may have left while conmon started.
    if (signal?.aborted) this.onAbort();
    else signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  private readonly onAbort = () => {
    this.cancelled = true;
    this.expire();
  };

  private expire(): void {
    if (this.killing || this.stopped) return;
    this.killing = true;
    void this.killLoop().catch(() => {});
  }

  /** True once the deadline killed a process (a command that ended just in time keeps its result). */
  get killedAny(): boolean {
    return this.killed.size > 0;
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.signal?.removeEventListener('abort', this.onAbort);
  }

  private async killLoop(): Promise<void> {
    while (!this.stopped) {
      for (const pid of await descendantsOf(this.conmonPid)) {
        const started = await processStartTime(pid);
        if (started === undefined) continue;
        signalProcess(pid, 'SIGKILL');
        this.killed.set(pid, started);
      }
      await delay(KILL_INTERVAL_MS);
    }
  }

  /**
   * Resolves once every killed process is dead (reaped, or a zombie waiting for the container's init),
   * or after GONE_TIMEOUT_MS.
   */
  async waitGone(): Promise<void> {
    const until = performance.now() + GONE_TIMEOUT_MS;
    for (const [pid, started] of this.killed) {
      const timeoutMs = until - performance.now();
      if (timeoutMs <= 0) return;
      await pollUntil(async () => !(await isSameProcessAlive(pid, started)), { timeoutMs, maxIntervalMs: 50 });
    }
  }
}

/** Host pids of every process below `root` (not `root` itself), from /proc's parent links. */
export async function descendantsOf(root: number): Promise<number[]> {
  const children = new Map<number, number[]>();
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const stat = await readFile(`/proc/${name}/stat`, 'utf8').catch(() => '');
    if (!stat) continue;
    // Field 4 (ppid) follows the state after the command name, which may contain spaces and parentheses.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    const list = children.get(ppid) ?? [];
    list.push(Number(name));
    children.set(ppid, list);
  }
  const out: number[] = [];
  const queue = [...(children.get(root) ?? [])];
  while (queue.length > 0) {
    const pid = queue.shift()!;
    out.push(pid);
    queue.push(...(children.get(pid) ?? []));
  }
  return out;
}

/** Waits for conmon; if it outlives its own timeout by far, kills it (a hung runtime). */
async function waitWithSafetyNet<T>(exited: Promise<T>, timeoutSeconds: number, kill: () => void): Promise<T> {
  if (timeoutSeconds <= 0) return exited;
  const timer = setTimeout(kill, (timeoutSeconds + CONMON_TIMEOUT_BACKSTOP_SECONDS + 30) * 1000);
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
