/**
 * The process side of CRI Exec, Attach and PortForward behind the streaming server (see the contract in
 * streaming/backend.ts):
 *
 * - exec runs the command through conmon (`Monitor.exec`) with the container's own process spec (user,
 *   env, cwd, capabilities, …) and only the args replaced, on a terminal when the session asks for one;
 *   terminal sizes go to conmon's ctl FIFO; a client that goes away gets its process SIGKILLed.
 * - attach connects to conmon's attach socket (`Monitor.attach`); detaching leaves the container
 *   running (conmon closes the container's stdin on detach only for stdin_once containers).
 * - portForward dials localhost:<port> inside the pod's network namespace through
 *   `nsenter --net=<pin> socat - TCP4:127.0.0.1:<port>` (then `TCP6:[::1]`), since Node cannot enter a
 *   namespace itself; a host-network pod is dialled directly from the daemon.
 *
 * `streamingLookup` answers the existence checks the server makes when it hands out a URL.
 */
import net from 'node:net';
import { Duplex } from 'node:stream';
import { setTimeout as delay } from 'node:timers/promises';
import { failedPrecondition, messageOf, notFound, cancelled, unavailable } from '../common/errors.js';
import { shortId } from '../common/ids.js';
import type { Logger } from '../common/logger.js';
import type { ExecTarget } from '../container/service.js';
import type { ContainerStateName } from '../container/model.js';
import type { Monitor } from '../monitor/monitor.js';
import { execProcess } from '../monitor/exec-dir.js';
import { spawnInNetns } from '../network/netns-exec.js';
import type { SpawnedProcess } from '../platform/processes.js';
import type { SandboxState } from '../sandbox/model.js';
import type { AttachParams, ExecParams, StreamingBackend, StreamingLookup, StreamIO, TerminalSize } from './backend.js';
import { relay } from './relay.js';

/** How long an exec with a terminal waits for the client's first size before it starts anyway. */
const INITIAL_SIZE_WAIT_MS = 250;
/**
 * socat's wait for the second direction after one side reached EOF (default 0.5 s, too short for a
 * client that half-closes and then waits for the answer). The connection is closed when the
 * port-forward stream closes anyway.
 */
const SOCAT_HALF_CLOSE_SECONDS = 24 * 60 * 60;
/** socat's notice once the TCP connection is up. */
const SOCAT_CONNECTED = 'starting data transfer loop';

/** What the backend needs from the container and sandbox services (narrow, so tests can fake it). */
export interface StreamingBackendDeps {
  containers: {
    /** NotFound for an unknown container. */
    execTarget(id: string): ExecTarget;
    find(id: string): { id: string; state: ContainerStateName } | undefined;
  };
  sandboxes: {
    find(id: string): { id: string; state: SandboxState; netnsPath: string } | undefined;
  };
  monitor: Pick<Monitor, 'exec' | 'attach'>;
  log: Logger;
  /** The socat binary (default: `socat` on PATH). */
  socat?: string;
}

/** The existence checks for the streaming server: a container must run, a pod must be ready. */
export function streamingLookup(deps: Pick<StreamingBackendDeps, 'containers' | 'sandboxes'>): StreamingLookup {
  return {
    async container(id) {
      const c = deps.containers.find(id);
      if (!c) return undefined;
      if (c.state !== 'running') throw failedPrecondition(`container "${c.id}" is not running (${c.state.toUpperCase()})`);
      return c.id;
    },
    async sandbox(id) {
      const s = deps.sandboxes.find(id);
      if (!s) return undefined;
      if (s.state !== 'ready') throw failedPrecondition(`pod sandbox "${s.id}" is not ready`);
      return s.id;
    },
  };
}

export class CriStreamingBackend implements StreamingBackend {
  private readonly log: Logger;
  /** Sessions in progress, so that a stopping daemon can wait for their cleanup. */
  private readonly inFlight = new Set<Promise<unknown>>();

  constructor(private readonly deps: StreamingBackendDeps) {
    this.log = deps.log;
  }

  /**
   * Waits (at most `timeoutMs`) for the sessions in progress to settle, e.g. after the streaming
   * server stopped and aborted them: their processes are then killed and their scratch files gone.
   */
  async drain(timeoutMs = 5000): Promise<void> {
    if (this.inFlight.size === 0) return;
    const all = Promise.allSettled([...this.inFlight]);
    await Promise.race([all, delay(timeoutMs, undefined, { ref: false })]);
  }

  private track<T>(session: Promise<T>): Promise<T> {
    this.inFlight.add(session);
    void session.then(
      () => this.inFlight.delete(session),
      () => this.inFlight.delete(session),
    );
    return session;
  }

  exec(params: ExecParams, io: StreamIO): Promise<number> {
    return this.track(this.runExec(params, io));
  }

  attach(params: AttachParams, io: StreamIO): Promise<void> {
    return this.track(this.runAttach(params, io));
  }

  portForward(podSandboxId: string, port: number, stream: Duplex, signal: AbortSignal): Promise<void> {
    return this.track(this.runPortForward(podSandboxId, port, stream, signal));
  }

  // ---- exec ---------------------------------------------------------------------------------------

  private async runExec(params: ExecParams, io: StreamIO): Promise<number> {
    const target = this.runningTarget(params.containerId);
    const sizes = io.tty && io.resize ? io.resize[Symbol.asyncIterator]() : undefined;
    // The first size normally arrives with the streams: start the process on a terminal of that size.
    let pending = sizes?.next();
    let first: TerminalSize | undefined;
    if (pending && (await settlesWithin(pending, INITIAL_SIZE_WAIT_MS, io.signal))) {
      const r = await pending;
      pending = undefined;
      if (!r.done) first = r.value;
    }
    if (io.signal.aborted) throw cancelled('the client went away');
    const proc = execProcess(target.process, params.cmd, io.tty);
    // runc sizes the new terminal before the process runs (a resize through conmon would come after).
    if (first && first.width > 0 && first.height > 0) proc['consoleSize'] = { width: first.width, height: first.height };
    const session = await this.deps.monitor.exec(target.runtime, target.id, proc, {
      tty: io.tty,
      stdin: io.stdin,
      stdout: io.stdout,
      stderr: io.tty ? undefined : io.stderr,
      width: first?.width,
      height: first?.height,
    });
    const log = this.log.child({ container: shortId(target.id), pid: session.pid });
    log.debug('exec started', { cmd: params.cmd, tty: io.tty });
    const onAbort = () => {
      log.info('exec client went away; killing the process', { cmd: params.cmd });
      session.kill();
    };
    io.signal.addEventListener('abort', onAbort, { once: true });
    if (io.signal.aborted) onAbort();
    if (sizes) void forwardSizes(sizes, pending, (s) => session.resize(s.width, s.height), log);
    try {
      return await session.exitCode;
    } finally {
      io.signal.removeEventListener('abort', onAbort);
    }
  }

  // ---- attach -------------------------------------------------------------------------------------

  private async runAttach(params: AttachParams, io: StreamIO): Promise<void> {
    const target = this.runningTarget(params.containerId);
    // Input goes only to a container that has some (a stdin pipe or a terminal); else it is drained.
    const stdin = io.stdin && (target.stdin || target.tty) ? io.stdin : undefined;
    if (io.stdin && !stdin) io.stdin.resume();
    const session = await this.deps.monitor.attach(target.id, {
      stdin,
      stdout: io.stdout,
      stderr: target.tty ? undefined : io.stderr,
    });
    const log = this.log.child({ container: shortId(target.id) });
    log.debug('attached', { stdin: stdin !== undefined, tty: target.tty });
    const sizes = target.tty && io.resize ? io.resize[Symbol.asyncIterator]() : undefined;
    if (sizes) void forwardSizes(sizes, undefined, (s) => session.resize(s.width, s.height), log);
    await new Promise<void>((resolve) => {
      const detach = () => {
        session.close();
        resolve();
      };
      io.signal.addEventListener('abort', detach, { once: true });
      if (io.signal.aborted) detach();
      // A container that keeps its stdin open across attaches: the session ends with the client's input.
      if (stdin && target.stdin && !target.stdinOnce && !target.tty) stdin.once('end', detach);
      void session.done.then(() => {
        io.signal.removeEventListener('abort', detach);
        resolve();
      });
    });
  }

  // ---- port-forward -------------------------------------------------------------------------------

  private async runPortForward(podSandboxId: string, port: number, stream: Duplex, signal: AbortSignal): Promise<void> {
    const sandbox = this.deps.sandboxes.find(podSandboxId);
    if (!sandbox) throw notFound(`pod sandbox "${podSandboxId}" not found`);
    if (sandbox.state !== 'ready') throw failedPrecondition(`pod sandbox "${sandbox.id}" is not ready`);
    const conn = sandbox.netnsPath
      ? await this.dialInNetns(sandbox.netnsPath, sandbox.id, port, signal)
      : await dialHost(port, sandbox.id);
    if (!conn) return; // aborted while dialling
    this.log.debug('port forward connected', { podSandboxId: shortId(sandbox.id), port, hostNetwork: !sandbox.netnsPath });
    await relay(stream, conn, signal);
  }

  /** localhost:<port> in the pod's namespace: 127.0.0.1 first, then ::1, as a dual-stack dial would. */
  private async dialInNetns(netnsPath: string, id: string, port: number, signal: AbortSignal): Promise<Duplex | undefined> {
    const failures: string[] = [];
    for (const [family, address] of [['IPv4', `TCP4:127.0.0.1:${port}`], ['IPv6', `TCP6:[::1]:${port}`]] as const) {
      const socat = [this.deps.socat ?? 'socat', '-d', '-d', '-t', String(SOCAT_HALF_CLOSE_SECONDS), '-', address];
      const dialled = await socatDial(spawnInNetns(netnsPath, socat, { stdio: ['pipe', 'pipe', 'pipe'], directPipes: true }), signal);
      if (dialled.conn || signal.aborted) return dialled.conn;
      failures.push(`${family}: ${dialled.error}`);
    }
    throw unavailable(`failed to connect to localhost:${port} inside the network namespace of pod sandbox "${id}": ${failures.join('; ')}`);
  }

  /** The container if it exists and runs; a plain Error otherwise (its message reaches the client). */
  private runningTarget(id: string): ExecTarget {
    const target = this.deps.containers.execTarget(id);
    if (target.state !== 'running') throw failedPrecondition(`container "${target.id}" is not running (${target.state.toUpperCase()})`);
    return target;
  }
}

/** True when `p` settles within `ms` (false on timeout or abort). */
async function settlesWithin(p: Promise<unknown>, ms: number, signal: AbortSignal): Promise<boolean> {
  const ac = new AbortController();
  const onAbort = () => ac.abort();
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    return await Promise.race([
      p.then(() => true),
      delay(ms, false, { signal: ac.signal }).catch(() => false),
    ]);
  } finally {
    ac.abort();
    signal.removeEventListener('abort', onAbort);
  }
}

/** Applies every size the client sends (starting with `pending`, a next() already asked for) until the session ends. */
async function forwardSizes(
  sizes: AsyncIterator<TerminalSize>,
  pending: Promise<IteratorResult<TerminalSize>> | undefined,
  apply: (size: TerminalSize) => Promise<void>,
  log: Logger,
): Promise<void> {
  for (let next = pending ?? sizes.next(); ; next = sizes.next()) {
    const r = await next;
    if (r.done) return;
    if (r.value.width === 0 || r.value.height === 0) continue;
    await apply(r.value).catch((err: unknown) => log.debug('resize failed', { error: messageOf(err) }));
  }
}

/** Connects to localhost:<port> on the host (a host-network pod), trying 127.0.0.1, then ::1. */
async function dialHost(port: number, id: string): Promise<Duplex> {
  const failures: string[] = [];
  for (const [family, host] of [['IPv4', '127.0.0.1'], ['IPv6', '::1']] as const) {
    try {
      return await new Promise<net.Socket>((resolve, reject) => {
        const socket = net.connect({ port, host });
        socket.once('connect', () => {
          socket.off('error', reject);
          resolve(socket);
        });
        socket.once('error', reject);
      });
    } catch (err) {
      failures.push(`${family}: ${messageOf(err)}`);
    }
  }
  throw unavailable(`failed to connect to localhost:${port} of host-network pod sandbox "${id}": ${failures.join('; ')}`);
}

/**
 * Waits until socat reports the connection (then returns a Duplex over its stdio) or exits (then
 * returns its error, e.g. "Connection refused").
 */
function socatDial(child: SpawnedProcess, signal: AbortSignal): Promise<{ conn?: Duplex; error?: string }> {
  return new Promise((resolve) => {
    let stderr = '';
    let connected = false;
    const onAbort = () => child.kill('SIGKILL');
    signal.addEventListener('abort', onAbort, { once: true });
    child.stdin!.on('error', () => {}); // EPIPE after socat exits; its exit status tells why
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (text: string) => {
      if (stderr.length < 65536) stderr += text;
      if (!connected && stderr.includes(SOCAT_CONNECTED)) {
        connected = true;
        signal.removeEventListener('abort', onAbort);
        resolve({ conn: socatConnection(child, () => stderr) });
      }
    });
    child.once('error', (err: Error) => {
      if (connected) return;
      signal.removeEventListener('abort', onAbort);
      resolve({ error: `cannot run socat: ${err.message}` });
    });
    child.once('close', (code: number | null, sig: NodeJS.Signals | null) => {
      if (connected) return;
      signal.removeEventListener('abort', onAbort);
      resolve({ error: socatError(stderr) || `socat exited with ${code ?? sig}` });
    });
  });
}

/** socat's error line, without its timestamp and pid: "connect(5, AF=2 127.0.0.1:80, 16): Connection refused". */
function socatError(stderr: string): string {
  const line = stderr.split('\n').find((l) => / E /.test(l)) ?? '';
  const text = line.replace(/^.*? E /, '').trim();
  const reason = /: ([^:]+)$/.exec(text)?.[1];
  return reason ? reason.toLowerCase() : text;
}

/**
 * The TCP connection socat holds, as a Duplex: writes go to its stdin (end() half-closes the
 * connection), its stdout is what the peer sent. Destroying it kills socat; socat failing after the
 * connection was up (a reset) is an error with code ECONNRESET.
 */
function socatConnection(child: SpawnedProcess, stderr: () => string): Duplex {
  const stdin = child.stdin!;
  const stdout = child.stdout!;
  const conn = new Duplex({
    read() {
      stdout.resume();
    },
    write(chunk: Buffer, _encoding, callback) {
      stdin.write(chunk, (err) => callback(err ?? null));
    },
    final(callback) {
      stdin.end(callback);
    },
    destroy(err, callback) {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      callback(err);
    },
  });
  stdout.on('data', (chunk: Buffer) => {
    if (!conn.push(chunk)) stdout.pause();
  });
  stdout.once('end', () => conn.push(null));
  // A clean exit needs nothing: both directions have ended, so the Duplex closes once read.
  child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
    if ((code === 0 && signal === null) || conn.destroyed) return;
    const why = socatError(stderr()) || `socat exited with ${code ?? signal}`;
    conn.destroy(Object.assign(new Error(why), { code: /reset|broken pipe/i.test(why) ? 'ECONNRESET' : undefined }));
  });
  return conn;
}
