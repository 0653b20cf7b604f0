/**
 * Streaming exec (CRI Exec behind the streaming server) through conmon's exec-attach mode, as podman
 * runs it: `conmon --api-version 1 -e --exec-attach …`. conmon owns the pty (runc's console socket
 * hands over a pty fd with SCM_RIGHTS, which Node cannot receive) and serves the same attach socket
 * and ctl FIFO as a container, so tty and non-tty execs share one code path.
 *
 * Handshake: one byte on fd 4 → conmon opens the attach socket and says `{"data": 0}` on fd 5 → we
 * connect → a second byte on fd 4 → conmon runs `runc exec` → `{"data": <pid>}` and, when the process
 * is gone, `{"data": <exit code>}` on fd 3.
 */
import { unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { StoveError, messageOf } from '../common/errors.js';
import { runtimeErrorKind, runtimeMessage, type Runc } from '../runtime/runc.js';
import { openRelay, type RelaySession, type SessionIo } from './attach.js';
import { detachConmon, releaseConmon, spawnConmon, type ConmonConfig, type ConmonProcess } from './conmon.js';
import { resizeTerminal } from './ctl.js';
import { MonitorError } from './errors.js';
import { createExecDir, type ExecDir, type OciProcess } from './exec-dir.js';
import { readPidFile, signalProcess } from './process.js';

/** Milliseconds to wait for each step of the exec handshake. */
const HANDSHAKE_TIMEOUT_MS = 30_000;
/** After kill(), output still in flight gets this long to arrive before the connection is dropped. */
const KILL_GRACE_MS = 2000;

export interface ExecStreamOptions extends SessionIo {
  /** Run the process on a terminal (stdout and stderr merge into stdout). */
  tty: boolean;
  /** Initial terminal size, applied as soon as the process runs. */
  width?: number;
  height?: number;
}

/** A running streaming exec. */
export interface ExecSession {
  /** Host pid of the exec'd process. */
  readonly pid: number;
  /** The process's exit code (128 + signal when killed), once it has exited and all output was written. */
  readonly exitCode: Promise<number>;
  /** Resizes the exec's terminal. */
  resize(width: number, height: number): Promise<void>;
  /** Kills the process (SIGKILL), e.g. when the client went away; exitCode then settles. */
  kill(): void;
}

/** conmon's command line for an exec-attach session (unit-tested). */
export function execAttachArgs(
  config: ConmonConfig,
  runtime: Runc,
  containerId: string,
  dir: Pick<ExecDir, 'id' | 'dir' | 'pidFile' | 'processFile'>,
  tty: boolean,
  stdin: boolean,
): string[] {
  const args = [
    '--api-version', '1',
    '-c', containerId,
    '-u', dir.id,
    '-r', runtime.binary,
    '-b', dir.dir,
    '-p', dir.pidFile,
    '-l', 'none',
    '--exit-dir', dir.dir,
    '--socket-dir-path', config.attachDir,
    // debug output of conmon's child would land in the exec's stderr stream
    '--log-level', config.logLevel === 'debug' ? 'info' : (config.logLevel ?? 'info'),
    '-e', '--exec-attach',
    '--exec-process-spec', dir.processFile,
  ];
  for (const arg of runtime.globalArgs()) args.push('--runtime-arg', arg);
  if (tty) args.push('-t');
  else if (stdin) args.push('-i');
  return args;
}

/** Starts `proc` in the container with its stdio connected to `opts`; resolves once it runs. */
export async function execStreaming(
  config: ConmonConfig,
  relayPath: string,
  runtime: Runc,
  containerId: string,
  proc: OciProcess,
  opts: ExecStreamOptions,
): Promise<ExecSession> {
  const log = config.log.child({ container: containerId });
  const dir = await createExecDir(config.execDir, { ...proc, terminal: opts.tty });
  const cleanup = async () => {
    await unlink(join(config.attachDir, dir.id)).catch(() => {});
    await dir.remove();
  };
  let conmon: ConmonProcess | undefined;
  let relay: RelaySession | undefined;
  try {
    conmon = await spawnConmon(config, execAttachArgs(config, runtime, containerId, dir, opts.tty, opts.stdin !== undefined), dir.dir, { attachPipe: true });
    releaseConmon(conmon, false);
    await expectReady(conmon, containerId);
    relay = await openRelay(relayPath, join(config.attachDir, dir.id, 'attach'), opts, containerId, log);
    releaseConmon(conmon);
    const pid = await expectPid(conmon, containerId, runtime.binary);
    const ctl = join(dir.dir, 'ctl');
    if (opts.tty && opts.width && opts.height) {
      await resizeTerminal(ctl, opts.width, opts.height, containerId).catch((err) => log.debug('initial resize failed', { error: messageOf(err) }));
    }
    const exitCode = waitForExit(conmon, relay, containerId).finally(() => {
      detachConmon(conmon!);
      return cleanup();
    });
    exitCode.catch(() => {}); // the caller may never look; errors are still delivered to those who do
    return {
      pid,
      exitCode,
      resize: (width, height) => resizeTerminal(ctl, width, height, containerId),
      kill: () => {
        signalProcess(pid, 'SIGKILL');
        // A reader that stopped reading would leave conmon blocked on the socket: drop it after a grace period.
        setTimeout(() => relay!.close(), KILL_GRACE_MS).unref();
      },
    };
  } catch (err) {
    relay?.close();
    if (conmon) {
      signalProcess(conmon.child.pid!, 'SIGKILL');
      const childPid = await readPidFile(dir.pidFile); // a half-started exec
      if (childPid) signalProcess(childPid, 'SIGKILL');
      detachConmon(conmon);
    }
    await cleanup();
    if (err instanceof StoveError) throw err;
    throw new MonitorError('Internal', `failed to exec in container "${containerId}": ${messageOf(err)}`, containerId, { cause: err });
  }
}

/** fd 5: conmon's attach socket is ready. */
async function expectReady(conmon: ConmonProcess, id: string): Promise<void> {
  const ready = await conmon.attachPipe!.next(HANDSHAKE_TIMEOUT_MS, () => timeout(id, 'the attach socket'));
  if (!ready || ready.value !== 0) {
    throw new MonitorError('Internal', `failed to exec in container "${id}": ${ready?.message ?? (conmon.output() || 'conmon did not open the attach socket')}`, id);
  }
}

/** fd 3: the exec'd process is running (or the runtime's error). */
async function expectPid(conmon: ConmonProcess, id: string, runtime: string): Promise<number> {
  const started = await conmon.sync.next(HANDSHAKE_TIMEOUT_MS, () => timeout(id, 'the process to start'));
  if (!started) {
    // conmon relays the runtime's error output; crun 1.8 writes why a process with a terminal could not
    // start (a missing executable) to that terminal only, and conmon then exits with nothing to say.
    const why = conmon.output() || `${runtime} exec did not start the process and wrote no error (with a terminal, crun 1.8 reports it on the terminal only)`;
    throw new MonitorError('Internal', `failed to exec in container "${id}": ${why}`, id);
  }
  if (started.value <= 0) {
    const why = runtimeMessage(started.message ?? '') || `runtime exec failed (${started.value})`;
    throw new MonitorError(runtimeErrorKind(why), `failed to exec in container "${id}": ${why}`, id);
  }
  return started.value;
}

/** fd 3 again: the exit code; then waits for the last output to be written. */
async function waitForExit(conmon: ConmonProcess, relay: RelaySession, id: string): Promise<number> {
  const exit = await conmon.sync.next(Number.MAX_SAFE_INTEGER, () => timeout(id, 'the exit code'));
  await relay.done;
  if (!exit) throw new MonitorError('Internal', `exec in container "${id}": conmon exited without an exit code`, id);
  if (exit.message) throw new MonitorError('Internal', `exec in container "${id}": ${runtimeMessage(exit.message)}`, id);
  return exit.value;
}

function timeout(id: string, what: string): MonitorError {
  return new MonitorError('DeadlineExceeded', `failed to exec in container "${id}": timed out waiting for ${what}`, id);
}
