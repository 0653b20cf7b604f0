/**
 * The gRPC server on a unix socket (the transport is grpc-http2.ts on node:http2). Refuses to start when another live server answers on the socket,
 * removes a stale one, and drains in-flight calls on shutdown. Whoever reaches the socket is
 * root-equivalent, so it is never wider than 0660, not even between bind and chmod (the umask is
 * 0117 while binding), and its directory must be a real directory owned by the daemon's user that no
 * one else can write to (else anyone could put their own socket in its place). One connection may
 * have at most MAX_CONCURRENT_STREAMS calls in flight; at most MAX_CONNECTIONS connections are open, and
 * beyond IDLE_CONNECTIONS_KEPT a new one closes the one idle longest; a
 * request must arrive within REQUEST_TIMEOUT_MS of its headers, and a response be taken within
 * RESPONSE_STALL_MS; a connection without calls is closed (FIRST_CALL_TIMEOUT_MS,
 * IDLE_CONNECTION_TIMEOUT_MS). Responses marked for reuse (wire-reuse.ts) are encoded once.
 */
import type { ServiceDefinition } from '@grpc/grpc-js';
import http2 from 'node:http2';
import { connect } from 'node:net';
import { chmod, mkdir, unlink, lstat } from 'node:fs/promises';
import { userInfo } from 'node:os';
import { dirname } from 'node:path';
import { StoveError } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import { withWireReuse } from './wire-reuse.js';
import { ConnectionCalls, serveStream, Watchdog, type Route, type ServerStreamImplementation, type UnaryImplementation } from './grpc-http2.js';

/** 16 MiB each way, as containerd and the kubelet's CRI client use. */
export const MAX_MESSAGE_BYTES = 16 << 20;
/** Calls in flight on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); the kubelet uses one connection. */
export const MAX_CONCURRENT_STREAMS = 1000;
/** Request headers (metadata) per call, as grpc-go's default (16 KiB). */
const MAX_HEADER_LIST_BYTES = 16 << 10;
/** Header fields per request, as node:http2's default: gRPC metadata is a handful. */
const MAX_HEADER_LIST_PAIRS = 128;
/**
 * What node:http2 tolerates of a connection before ending it, each at node:http2's default, set here so
 * that docs/security.md can name them: entries in one SETTINGS frame, frames it had to discard as
 * invalid, streams it refused (beyond the stream limit or the memory below).
 */
const MAX_SETTINGS_ENTRIES = 32;
const MAX_INVALID_FRAMES = 1000;
const MAX_REFUSED_STREAMS = 100;
/**
 * What one connection may hold in answers waiting for the client, header tables and unacknowledged
 * frames (node:http2's maxSessionMemory, MB; beyond it new calls are refused), and in request messages
 * buffered before their handlers run (ConnectionCalls): room for a few messages at the 16 MiB limit,
 * not a way for one client to take the node's memory.
 */
const MAX_CONNECTION_MEMORY_MB = 64;
/** How long a connection we closed may take to flush its last frames before its socket is destroyed. */
const ENDING_GRACE_MS = 10_000;
/**
 * Open connections at most; one more is closed at once (net.Server's maxConnections) and logged: not
 * for a client that opens connections until the daemon runs out of file descriptors or memory (each
 * may buffer up to MAX_CONNECTION_MEMORY_MB). Connections with calls in flight count here; idle ones are
 * closed well before (IDLE_CONNECTIONS_KEPT).
 */
const MAX_CONNECTIONS = 1024;
/**
 * Connections kept open beyond this many: a new one closes the connection that has been idle (its calls
 * ended, none in flight) the longest, gracefully (GOAWAY; a gRPC client reconnects on its next call).
 * Not one that has yet to make its first call: many clients connecting at once (200 `crictl exec`)
 * would each close another's connection before its first call arrived: the call is refused (GOAWAY,
 * last stream 0), which grpc-js retries on a new connection and a client without such a retry fails. The kubelet
 * holds two (runtime and image service) and calls every few seconds; tools that make a client per task
 * and never close it (critest does so per spec: over 200 connections in one run) must not use up
 * MAX_CONNECTIONS and lock out the kubelet.
 */
const IDLE_CONNECTIONS_KEPT = 128;
/**
 * A request message must arrive within this long after its headers. Not a config key: no client has a
 * reason to send a CRI request (16 MiB at most, over a local socket) slowly, and only a stalled or
 * hostile one ever reaches it.
 */
const REQUEST_TIMEOUT_MS = 30_000;
/**
 * A response (or the next message of a stream) the client does not take for this long has its stream
 * reset: a client that stops reading must not keep its answers in the daemon's memory. The kubelet
 * reads as it goes; a minute covers a node too loaded to schedule it for a while.
 */
const RESPONSE_STALL_MS = 60_000;
/** A connection that has not opened a call this long after connecting is closed. */
const FIRST_CALL_TIMEOUT_MS = 30_000;
/**
 * A connection with no call in flight for this long is closed gracefully (GOAWAY), as grpc-go's
 * keepalive.MaxConnectionIdle does: a gRPC client reconnects on its next call, so a quiet kubelet loses
 * nothing (it polls every few seconds anyway, and grpc-go clients close their own connection after 30
 * minutes without calls). A connection with a call open (a GetContainerEvents stream that has been
 * quiet for hours) is never idle. No PING liveness: on a unix socket the kernel closes the socket of a
 * peer that died, so a connection never outlives its client unnoticed.
 */
const IDLE_CONNECTION_TIMEOUT_MS = 10 * 60_000;
/** At most one log line per this long about refused connections (a client in a loop must not flood the log). */
const REFUSED_LOG_INTERVAL_MS = 60_000;
/** While binding: the socket is created at most 0660. */
const BIND_UMASK = 0o117;

/** True when something accepts connections on the unix socket at `path`. */
export function socketIsLive(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = connect(path);
    sock.once('connect', () => {
      sock.destroy();
      resolve(true);
    });
    sock.once('error', () => resolve(false));
  });
}

/**
 * Creates the socket's directory if missing (0755) and checks it: a directory (not a symlink), owned by
 * the daemon's user, not writable by group or others.
 */
export async function checkSocketDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o755 });
  const st = await lstat(dir);
  const fix = `; use a directory only root can write to (such as /run/stove)`;
  if (!st.isDirectory()) throw new StoveError('FailedPrecondition', `the socket directory ${dir} is not a directory (a symlink?)${fix}`);
  const uid = userInfo().uid;
  if (st.uid !== uid) throw new StoveError('FailedPrecondition', `the socket directory ${dir} is owned by uid ${st.uid}, not ${uid}${fix}`);
  if (st.mode & 0o022)
    throw new StoveError('FailedPrecondition', `the socket directory ${dir} is writable by others (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')})${fix}`);
}

/** Makes `path` free for a new server: refuses if it is live, removes it if stale. */
export async function ensureSocketFree(path: string): Promise<void> {
  await checkSocketDir(dirname(path));
  let exists = true;
  try {
    const st = await lstat(path);
    if (!st.isSocket()) throw new StoveError('FailedPrecondition', `${path} exists and is not a socket; refusing to replace it`);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') exists = false;
    else throw err;
  }
  if (!exists) return;
  if (await socketIsLive(path))
    throw new StoveError('FailedPrecondition', `another server is already listening on ${path}; stop it or pass --socket`);
  await unlink(path);
}

export interface ServiceBinding {
  definition: ServiceDefinition;
  implementation: Record<string, UnaryImplementation | ServerStreamImplementation>;
}

/** A started gRPC server and how to stop it. */
export interface GrpcEndpoint {
  readonly socketPath: string;
  /** Stops accepting calls, lets in-flight calls finish (up to graceMs), then removes the socket. */
  shutdown(graceMs?: number): Promise<void>;
}

/** The routes by `:path` for `services`, responses encoded through the wire-reuse marks. */
function routesOf(services: ServiceBinding[]): Map<string, Route> {
  const routes = new Map<string, Route>();
  for (const { definition, implementation } of services) {
    for (const [key, method] of Object.entries(withWireReuse(definition))) {
      const handler = implementation[key];
      if (!handler) continue;
      routes.set(method.path, {
        responseStream: method.responseStream,
        decode: method.requestDeserialize as (bytes: Buffer) => unknown,
        encode: method.responseSerialize as (message: unknown) => Buffer,
        handler,
      });
    }
  }
  return routes;
}

/** The transport's time and connection limits; the defaults above, smaller ones in tests. */
export interface ConnectionLimits {
  maxConnections: number;
  idleConnectionsKept: number;
  requestTimeoutMs: number;
  responseStallMs: number;
  firstCallTimeoutMs: number;
  idleConnectionTimeoutMs: number;
}

const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = {
  maxConnections: MAX_CONNECTIONS,
  idleConnectionsKept: IDLE_CONNECTIONS_KEPT,
  requestTimeoutMs: REQUEST_TIMEOUT_MS,
  responseStallMs: RESPONSE_STALL_MS,
  firstCallTimeoutMs: FIRST_CALL_TIMEOUT_MS,
  idleConnectionTimeoutMs: IDLE_CONNECTION_TIMEOUT_MS,
};

/** Whether a connection has a call in flight, and since when it has not. */
interface ConnectionActivity {
  /**
   * performance.now() when its last call ended; undefined while a call is open and before its first
   * call (a new connection's first call is on its way: closing it then refuses that call, which a
   * client must retry elsewhere; FIRST_CALL_TIMEOUT_MS and MAX_CONNECTIONS bound connections that
   * never call).
   */
  idleSince(): number | undefined;
}

/**
 * Closes `session` gracefully (GOAWAY; the calls open on it finish) and destroys it if it is still
 * there ENDING_GRACE_MS later: a peer that does not read would otherwise keep it.
 */
function closeGracefully(session: http2.ServerHttp2Session): void {
  if (session.closed || session.destroyed) return;
  session.close();
  const timer = setTimeout(() => session.destroy(), ENDING_GRACE_MS).unref();
  session.once('close', () => clearTimeout(timer));
}

/**
 * Closes `session` gracefully once it has had no call in flight for `idleMs` (`firstCallMs` before
 * its first call), as `calls` counts its streams. One timer per connection, never touched by a
 * call: when it fires it checks when the connection last went quiet and waits again for the rest
 * (re-arming a timer at the end of every call cost each call a rebuild of Node's timer list).
 */
function closeWhenIdle(
  session: http2.ServerHttp2Session,
  limits: ConnectionLimits,
  log: Logger,
  calls: ConnectionCalls,
): ConnectionActivity {
  const connectedAt = calls.quietSince;
  let timer: NodeJS.Timeout;
  const check = () => {
    if (session.closed || session.destroyed) return;
    const now = performance.now();
    const [since, limit, why] = calls.called
      ? [calls.quietSince, limits.idleConnectionTimeoutMs, 'no call in flight']
      : [connectedAt, limits.firstCallTimeoutMs, 'no call since it connected'];
    const open = calls.openStreams > 0;
    if (open || now - since < limit) {
      timer = setTimeout(check, open ? limits.idleConnectionTimeoutMs : limit - (now - since)).unref();
      return;
    }
    log.debug('closing an idle CRI connection', { reason: why });
    closeGracefully(session);
  };
  timer = setTimeout(check, Math.min(limits.firstCallTimeoutMs, limits.idleConnectionTimeoutMs)).unref();
  session.once('close', () => clearTimeout(timer));
  return { idleSince: () => (calls.openStreams > 0 || !calls.called ? undefined : calls.quietSince) };
}

/**
 * Beyond `kept` open connections, closes (GOAWAY) the one idle longest other than `newest`, if any:
 * one whose calls have all ended, never one with a call open or one yet to make its first call.
 */
function closeLongestIdle(
  sessions: Map<http2.ServerHttp2Session, ConnectionActivity>,
  newest: http2.ServerHttp2Session,
  kept: number,
  log: Logger,
): void {
  if (sessions.size <= kept) return;
  let oldest: http2.ServerHttp2Session | undefined;
  let oldestSince = Infinity;
  for (const [session, activity] of sessions) {
    const since = activity.idleSince();
    if (session === newest || session.closed || since === undefined || since >= oldestSince) continue;
    oldest = session;
    oldestSince = since;
  }
  if (!oldest) return;
  log.debug('closing an idle CRI connection', { reason: 'too many open', open: sessions.size, kept });
  closeGracefully(oldest);
}

/** Serves `services` on the unix socket at `socketPath`. */
export async function serveGrpc(
  socketPath: string,
  services: ServiceBinding[],
  log: Logger,
  connectionLimits: Partial<ConnectionLimits> = {},
): Promise<GrpcEndpoint> {
  await ensureSocketFree(socketPath);
  const routes = routesOf(services);
  const conn = { ...DEFAULT_CONNECTION_LIMITS, ...connectionLimits };
  const limits = {
    maxReceiveBytes: MAX_MESSAGE_BYTES,
    maxSendBytes: MAX_MESSAGE_BYTES,
    requestTimeoutMs: conn.requestTimeoutMs,
    responseStallMs: conn.responseStallMs,
  };
  const watchdog = Watchdog.forLimits(limits);
  const server = http2.createServer({
    settings: { maxConcurrentStreams: MAX_CONCURRENT_STREAMS, maxHeaderListSize: MAX_HEADER_LIST_BYTES, enablePush: false },
    maxHeaderListPairs: MAX_HEADER_LIST_PAIRS,
    maxSessionMemory: MAX_CONNECTION_MEMORY_MB,
    maxSettings: MAX_SETTINGS_ENTRIES,
    maxSessionInvalidFrames: MAX_INVALID_FRAMES,
    maxSessionRejectedStreams: MAX_REFUSED_STREAMS,
  });
  const sessions = new Map<http2.ServerHttp2Session, ConnectionActivity>();
  server.on('session', (session) => {
    // Counts the connection's streams for the idle rules as well as its calls and request bytes.
    const calls = new ConnectionCalls(MAX_CONCURRENT_STREAMS, MAX_CONNECTION_MEMORY_MB << 20);
    sessions.set(session, closeWhenIdle(session, conn, log, calls));
    session.once('close', () => sessions.delete(session));
    closeLongestIdle(sessions, session, conn.idleConnectionsKept, log);
    // A client that breaks the protocol loses its connection, never the daemon.
    session.on('error', (err: Error) => log.debug('CRI connection failed', { error: err.message }));
    session.on('stream', (stream, headers) => {
      try {
        serveStream(stream, headers, routes, limits, watchdog, calls);
      } catch (err) {
        log.error('CRI call failed in the transport', { error: (err as Error).message });
        stream.destroy();
      }
    });
  });
  server.on('sessionError', () => {});
  server.maxConnections = conn.maxConnections;
  let refused = 0;
  let refusedLoggedAt = -Infinity;
  server.on('drop', () => {
    refused++;
    const now = performance.now();
    if (now - refusedLoggedAt < REFUSED_LOG_INTERVAL_MS) return;
    log.warn('refused CRI connections: too many open', { maxConnections: conn.maxConnections, refused });
    refused = 0;
    refusedLoggedAt = now;
  });
  // The process-wide umask is narrowed only for the bind: nothing else creates files at this point.
  const umask = process.umask(BIND_UMASK);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(socketPath, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } finally {
    process.umask(umask);
  }
  server.on('error', (err: Error) => log.error('CRI server error', { error: err.message }));
  await chmod(socketPath, 0o660);
  log.info('serving CRI', { socket: socketPath });
  return {
    socketPath,
    async shutdown(graceMs = 10_000) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          log.warn('in-flight calls did not finish in time; closing them', { graceMs });
          for (const session of sessions.keys()) session.destroy();
        }, graceMs);
        // Stops accepting; the callback runs once every session has closed.
        server.close(() => {
          clearTimeout(timer);
          resolve();
        });
        // GOAWAY: no new calls on open connections, the calls in flight finish.
        for (const session of sessions.keys()) session.close();
      });
      await unlink(socketPath).catch(() => {});
    },
  };
}
