/**
 * Creating containers under conmon, as CRI-O does: conmon runs `runc create`, double-forks into its own
 * session (so it outlives Stove), writes the CRI log, keeps the attach socket and writes the exit file.
 * The caller then runs `runc start`.
 *
 * Handshake (CRI-O internal/oci/runtime_oci.go): conmon gets two socketpairs, fd 3 = sync pipe
 * (`_OCI_SYNCPIPE`), fd 4 = start pipe (`_OCI_STARTPIPE`). Stove may move conmon into a cgroup, writes
 * one byte to fd 4, and reads `{"pid": N}` or `{"pid": -1, "message": "<runtime stderr>"}` from fd 3.
 */
import { mkdir, readFile, rm, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { setTimeout as delay } from 'node:timers/promises';
import { invalidArgument, messageOf } from '../common/errors.js';
import { pollUntil } from '../common/poll.js';
import type { Logger } from '../common/logger.js';
import { startProcess, type SpawnedProcess } from '../platform/processes.js';
import { runtimeMessage, type Runc } from '../runtime/runc.js';
import { MonitorError } from './errors.js';
import { processStartTime, readPidFile, signalProcess } from './process.js';
import { SyncPipeReader } from './sync-pipe.js';

/** conmon's own log level (`--log-level`). */
export type ConmonLogLevel = 'debug' | 'info' | 'warn' | 'error';

/** What every conmon invocation shares. */
export interface ConmonConfig {
  /** conmon binary. */
  conmon: string;
  /** `--exit-dir`: conmon writes `<dir>/<id>` holding the exit code. */
  exitsDir: string;
  /** `--socket-dir-path`: holds `<id>` → bundle symlinks (keeps attach socket paths short). */
  attachDir: string;
  /** Scratch space for exec sessions (one subdirectory per exec, removed afterwards). */
  execDir: string;
  /** conmon's own log level (default `info`; `debug` leaks conmon lines into exec stderr). */
  logLevel?: ConmonLogLevel;
  /** Pass `--syslog` so conmon's own messages reach syslog. */
  syslog?: boolean;
  /** Milliseconds to wait for conmon to report the container pid (default 120 s). */
  createTimeoutMs?: number;
  log: Logger;
}

export interface CreateContainerOptions {
  /** Container ID (runc ID, exit file name and attach link name). */
  id: string;
  /** Name shown by conmon (`-n`); the ID when omitted. */
  name?: string;
  /** OCI bundle directory holding config.json (conmon's cwd). */
  bundle: string;
  /** `--persist-dir`: conmon writes `exit` and `oom` here; kept across daemon restarts. */
  persistDir: string;
  /** CRI log file (must not contain ':'); no log at all when empty or omitted. */
  logPath?: string;
  /** Rotate (truncate) the log at this many bytes; no limit when omitted or <= 0. */
  logSizeMax?: number;
  /** Allocate a terminal for the container (`-t`). */
  tty?: boolean;
  /** Keep a stdin pipe open for attach (`-i`); ignored with tty, which always has input. */
  stdin?: boolean;
  /** Close stdin after the first attach client disconnects (CRI `stdin_once`). */
  stdinOnce?: boolean;
  /** Pass `--no-pivot` to runc (rootfs on ramfs). */
  noPivot?: boolean;
  /**
   * Restore the container from the CRIU images in this directory (`conmon --restore`: `runc restore
   * --detach`) instead of creating it: it is running once the create resolves.
   */
  restorePath?: string;
  /** Called with conmon's pid before it is allowed to go on, e.g. to move it into a cgroup. */
  beforeStart?: (conmonPid: number) => Promise<void>;
}

/** A container in runc's `created` state with its monitor running. */
export interface CreatedContainer {
  /** Host pid of the container's init (runc init until `runc start`). */
  pid: number;
  /** /proc start time of `pid` in clock ticks (pid-reuse guard). */
  pidStartTime: bigint;
  /** Host pid of the long-lived conmon (re-parented to init). */
  conmonPid: number;
  /** /proc start time of `conmonPid`. */
  conmonStartTime: bigint;
}

const DEFAULT_CREATE_TIMEOUT_MS = 120_000;
/** Files conmon and runc leave in the bundle. */
const BUNDLE_ARTIFACTS = ['attach', 'ctl', 'winsz', 'pidfile', 'conmon-pidfile', 'oom'];

/** conmon's command line for a create (CRI-O's flags; unit-tested). */
export function conmonCreateArgs(config: ConmonConfig, runtime: Runc, opts: CreateContainerOptions): string[] {
  const args = [
    '-b', opts.bundle,
    '-c', opts.id,
    '-u', opts.id,
    '-n', opts.name || opts.id,
    '-r', runtime.binary,
    '--exit-dir', config.exitsDir,
    '-l', opts.logPath ? `k8s-file:${opts.logPath}` : 'none',
    '-p', join(opts.bundle, 'pidfile'),
    '-P', join(opts.bundle, 'conmon-pidfile'),
    '--persist-dir', opts.persistDir,
    '--socket-dir-path', config.attachDir,
    '--log-level', config.logLevel ?? 'info',
  ];
  for (const arg of runtime.globalArgs()) args.push('--runtime-arg', arg);
  // The runtime's own log lines (runc's systemd driver warns about devices it skips) go to a file in the
  // bundle, not to the container's stderr and so its CRI log; its fatal errors still reach stderr.
  args.push('--runtime-arg', `--log=${join(opts.bundle, 'runtime.log')}`);
  if (config.syslog) args.push('--syslog');
  if (opts.logSizeMax !== undefined && opts.logSizeMax > 0) args.push('--log-size-max', String(opts.logSizeMax));
  if (opts.noPivot) args.push('--no-pivot');
  if (opts.restorePath) args.push('--restore', opts.restorePath, '--runtime-opt=--file-locks');
  if (opts.tty) {
    args.push('-t');
  } else if (opts.stdin) {
    args.push('-i');
    if (!opts.stdinOnce) args.push('--leave-stdin-open');
  }
  return args;
}

/** Rejects paths conmon would misread: its `-l` value is split at ':'. */
export function checkLogPath(logPath: string | undefined): void {
  if (logPath && logPath.includes(':')) throw invalidArgument(`log path "${logPath}" must not contain ':'`);
}

/** A spawned conmon with its extra pipes. */
export interface ConmonProcess {
  child: SpawnedProcess;
  sync: SyncPipeReader;
  start: Writable;
  /** fd 5 (`_OCI_ATTACHPIPE`) when asked for. */
  attachPipe?: SyncPipeReader;
  /** Whatever conmon printed before detaching (its CLI errors land here). */
  output(): string;
  /** Resolves with conmon's exit status (the intermediate process when not `--sync`). */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Starts conmon with fds 3 (sync) and 4 (start), plus 5 (attach) when `attachPipe` is set. */
export async function spawnConmon(
  config: ConmonConfig,
  args: string[],
  cwd: string,
  options: { attachPipe?: boolean } = {},
): Promise<ConmonProcess> {
  const env: NodeJS.ProcessEnv = {
    PATH: process.env['PATH'] ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    _OCI_SYNCPIPE: '3',
    _OCI_STARTPIPE: '4',
  };
  if (options.attachPipe) env['_OCI_ATTACHPIPE'] = '5';
  const stdio: ('ignore' | 'pipe')[] = ['ignore', 'pipe', 'pipe', 'pipe', 'pipe'];
  if (options.attachPipe) stdio.push('pipe');
  config.log.debug('starting conmon', { args });
  const child = startProcess(config.conmon, args, { cwd, env, stdio, detached: true });
  let output = '';
  const collect = (chunk: Buffer) => {
    if (output.length < 65536) output += chunk.toString('utf8');
  };
  child.stdout!.on('data', collect);
  child.stderr!.on('data', collect);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code: number | null, signal: NodeJS.Signals | null) => resolve({ code, signal }));
    child.once('error', () => resolve({ code: null, signal: null }));
  });
  await new Promise<void>((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', (err: Error) => reject(new MonitorError('Internal', `failed to start conmon ${config.conmon}: ${err.message}`, '', { cause: err })));
  });
  const start = child.stdio[4] as Writable;
  start.on('error', () => {}); // conmon may close its end first; the sync pipe tells what happened
  return {
    child,
    sync: new SyncPipeReader(child.stdio[3] as Readable),
    start,
    attachPipe: options.attachPipe ? new SyncPipeReader((child.stdio as unknown as Readable[])[5]!) : undefined,
    output: () => output.trim(),
    exited,
  };
}

/** Lets conmon go on (one byte on the start pipe). */
export function releaseConmon(conmon: ConmonProcess, end = true): void {
  conmon.start.write(Buffer.from([0]));
  if (end) conmon.start.end();
}

/** Stops listening to a conmon that now lives on its own. */
export function detachConmon(conmon: ConmonProcess): void {
  conmon.sync.close();
  conmon.attachPipe?.close();
  conmon.start.destroy();
  conmon.child.stdout?.destroy();
  conmon.child.stderr?.destroy();
  conmon.child.unref();
}

/**
 * Creates the container under a new conmon; resolves when runc has it in the `created` state.
 * On any failure nothing is left: no conmon, no runc container, no attach link, no exit file.
 */
export async function createContainer(config: ConmonConfig, runtime: Runc, opts: CreateContainerOptions): Promise<CreatedContainer> {
  checkLogPath(opts.logPath);
  const log = config.log.child({ container: opts.id });
  await Promise.all([config.exitsDir, config.attachDir, opts.persistDir].map((d) => mkdir(d, { recursive: true, mode: 0o700 })));
  await removeBundleArtifacts(opts.bundle);
  const logExisted = opts.logPath ? await exists(opts.logPath) : true;
  let conmon: ConmonProcess | undefined;
  try {
    conmon = await spawnConmon(config, conmonCreateArgs(config, runtime, opts), opts.bundle);
    if (opts.beforeStart) await opts.beforeStart(conmon.child.pid!);
    releaseConmon(conmon);
    const pid = await waitForContainerPid(config, conmon, opts.id);
    const created = await describeCreated(conmon, opts.bundle, pid, opts.id);
    detachConmon(conmon);
    log.debug('container created under conmon', { pid: created.pid, conmonPid: created.conmonPid });
    return created;
  } catch (err) {
    if (conmon) {
      signalProcess(conmon.child.pid!, 'SIGKILL');
      detachConmon(conmon);
    }
    await undoCreate(config, runtime, opts, logExisted, log);
    throw err;
  }
}

/** Reads the sync pipe: the container pid, or the runtime's error. */
async function waitForContainerPid(config: ConmonConfig, conmon: ConmonProcess, id: string): Promise<number> {
  const timeoutMs = config.createTimeoutMs ?? DEFAULT_CREATE_TIMEOUT_MS;
  const message = await conmon.sync.next(
    timeoutMs,
    () => new MonitorError('DeadlineExceeded', `failed to create container "${id}": conmon did not report within ${timeoutMs} ms`, id),
  );
  if (!message) {
    const exit = await Promise.race([conmon.exited, delay(2000).then(() => undefined)]);
    const status = exit ? ` (conmon exit status ${exit.code ?? exit.signal})` : '';
    const why = conmon.output() || 'conmon exited without reporting a pid';
    throw new MonitorError('Internal', `failed to create container "${id}": ${why}${status}`, id);
  }
  if (message.value <= 0) {
    const why = runtimeMessage(message.message ?? '') || conmon.output() || 'runtime create failed';
    throw new MonitorError('Internal', `failed to create container "${id}": ${why}`, id);
  }
  return message.value;
}

/** pid, conmon pid and their start times, once conmon's intermediate process has exited. */
async function describeCreated(conmon: ConmonProcess, bundle: string, pid: number, id: string): Promise<CreatedContainer> {
  await Promise.race([conmon.exited, delay(5000)]);
  const conmonPid = await readPidFile(join(bundle, 'conmon-pidfile'));
  if (!conmonPid) throw new MonitorError('Internal', `failed to create container "${id}": conmon wrote no pid file`, id);
  const [pidStartTime, conmonStartTime] = await Promise.all([processStartTime(pid), processStartTime(conmonPid)]);
  if (pidStartTime === undefined) throw new MonitorError('Internal', `failed to create container "${id}": container process ${pid} is gone`, id);
  if (conmonStartTime === undefined) throw new MonitorError('Internal', `failed to create container "${id}": conmon ${conmonPid} is gone`, id);
  return { pid, pidStartTime, conmonPid, conmonStartTime };
}

/** Undoes a failed create; every step tolerates what is already gone. */
async function undoCreate(config: ConmonConfig, runtime: Runc, opts: CreateContainerOptions, logExisted: boolean, log: Logger): Promise<void> {
  const steps: [string, () => Promise<void>][] = [
    ['stop conmon', () => stopConmon(join(opts.bundle, 'conmon-pidfile'), opts.id)],
    ['delete runtime container', () => runtime.delete(opts.id, true)],
    ['remove attach link and exit file', () => removeContainerFiles(config, opts.id)],
    ['remove conmon files', async () => {
      await removeBundleArtifacts(opts.bundle);
      await rm(join(opts.persistDir, 'exit'), { force: true });
      await rm(join(opts.persistDir, 'oom'), { force: true });
      if (!logExisted && opts.logPath) await rm(opts.logPath, { force: true });
    }],
  ];
  for (const [what, step] of steps) {
    try {
      await step();
    } catch (err) {
      log.error('cleanup after failed create', { step: what, error: messageOf(err) });
    }
  }
}

/** Kills the conmon named by a pid file if it is still a conmon for this container. */
async function stopConmon(pidFile: string, id: string): Promise<void> {
  const pid = await readPidFile(pidFile);
  if (!pid || !(await isConmonFor(pid, id))) return;
  signalProcess(pid, 'SIGKILL');
  await pollUntil(async () => (await processStartTime(pid)) === undefined, { timeoutMs: 2000, maxIntervalMs: 100 });
}

/** True when pid is a conmon whose command line names this container. */
async function isConmonFor(pid: number, id: string): Promise<boolean> {
  try {
    const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0');
    return argv[0]!.endsWith('conmon') && argv.includes(id);
  } catch {
    return false;
  }
}

/**
 * Removes what conmon leaves outside the bundle once the container is deleted: the attach link
 * (conmon removes only the socket) and the exit file. Safe to call repeatedly.
 */
export async function removeContainerFiles(config: Pick<ConmonConfig, 'attachDir' | 'exitsDir'>, id: string): Promise<void> {
  await unlinkIfPresent(join(config.attachDir, id));
  await unlinkIfPresent(join(config.exitsDir, id));
}

async function removeBundleArtifacts(bundle: string): Promise<void> {
  await Promise.all(BUNDLE_ARTIFACTS.map((name) => rm(join(bundle, name), { force: true })));
}

async function unlinkIfPresent(path: string): Promise<void> {
  try {
    await unlink(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}
