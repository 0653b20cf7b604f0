/**
 * The streaming server behind CRI Exec, Attach and PortForward. The RPCs (cri/exec.ts, attach.ts, port-forward.ts) validate
 * the request and hand its parameters here; the server checks that the container or pod exists, stores
 * the parameters under a single-use token and returns `http://<address>:<port>/{exec,attach,portforward}/<token>`.
 * The client then connects there with a SPDY/3.1 upgrade (crictl, critest, the kubelet) or a WebSocket
 * (crictl `--transport websocket`, newer kubelets); every parameter comes from what was stored, none from
 * the URL. An unknown, used or expired token is a 404 and runs nothing.
 *
 * Usage (daemon.ts):
 *
 *   const streaming = new StreamingServer({ ...streamingOptionsFromConfig(config.streaming), backend, lookup, log });
 *   await streaming.start();
 *   exec: (r) => exec(streaming, r),   // cri/rpc-table.ts; likewise attach, portForward
 *   …
 *   await streaming.stop();
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { WebSocket, WebSocketServer } from 'ws';
import { StoveError, invalidArgument, notFound, messageOf, internal } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import type { StreamingConfig } from '../config/schema.js';
import type { AttachParams, ExecParams, PortForwardParams, StreamingBackend, StreamingLookup } from './backend.js';
import {
  PROTOCOL_HEADER,
  SPDY_COMMAND_PROTOCOLS,
  SPDY_PORTFORWARD_PROTOCOLS,
  WS_COMMAND_PROTOCOLS,
  WS_PORTFORWARD_PROTOCOLS,
  WS_SPDY_TUNNEL_PROTOCOL,
  acceptSpdyUpgrade,
  commandProtocolVersion,
  headerValues,
  negotiate,
  rejectUpgrade,
  wantsSpdy,
  wantsWebSocket,
} from './negotiate.js';
import { servePortForward } from './portforward.js';
import type { CommandSession } from './remotecommand.js';
import { serveSpdyCommand } from './spdy-command.js';
import { DEFAULT_MAX_STREAMS } from './spdy.js';
import { TokenCache } from './tokens.js';
import { serveWsCommand, serveWsPortForward } from './ws-command.js';

// node:http as the module object, not through an ESM import: the ESM namespace reads every export, and
// http's WebSocket, MessageEvent and CloseEvent getters load Node's bundled undici (~12 MiB resident).
const { createServer } = process.getBuiltinModule('node:http');

export const DEFAULT_IDLE_TIMEOUT_MS = 4 * 60 * 60 * 1000;
export const DEFAULT_STREAM_CREATION_TIMEOUT_MS = 30_000;
export const DEFAULT_MAX_IN_FLIGHT = 1000;
export const DEFAULT_MAX_SESSIONS = 1024;
export const DEFAULT_MAX_SESSIONS_PER_TARGET = 64;

export interface StreamingServerOptions {
  /** Address to bind (and to put in URLs). */
  address: string;
  /** Port to bind; 0 picks a free one. */
  port: number;
  /** How long a URL stays valid. */
  tokenTtlMs: number;
  /** Outstanding URLs at most; more is RESOURCE_EXHAUSTED. Default 1000. */
  maxInFlight?: number;
  /** A connection without traffic for this long is closed. Default 4 h. */
  idleTimeoutMs?: number;
  /** How long a client may take to open its streams. Default 30 s. */
  streamCreationTimeoutMs?: number;
  /** Open connections at most (`streaming.max_sessions`). */
  maxSessions?: number;
  /** Open connections at most per container or pod (`streaming.max_sessions_per_container`). */
  maxSessionsPerTarget?: number;
  /** Open streams at most per connection (`streaming.max_streams_per_session`). */
  maxStreamsPerSession?: number;
  backend: StreamingBackend;
  lookup: StreamingLookup;
  log: Logger;
}

/** The server's settings from the `[streaming]` config section. */
export function streamingOptionsFromConfig(
  config: StreamingConfig,
): Pick<
  StreamingServerOptions,
  'address' | 'port' | 'tokenTtlMs' | 'idleTimeoutMs' | 'maxSessions' | 'maxSessionsPerTarget' | 'maxStreamsPerSession'
> {
  return {
    address: config.address,
    port: config.port,
    tokenTtlMs: config.tokenTtlSeconds * 1000,
    idleTimeoutMs: config.idleTimeoutSeconds * 1000,
    maxSessions: config.maxSessions,
    maxSessionsPerTarget: config.maxSessionsPerContainer,
    maxStreamsPerSession: config.maxStreamsPerSession,
  };
}

type Kind = 'exec' | 'attach' | 'portforward';
type Stored = CommandSession | { kind: 'portforward'; params: PortForwardParams };

const ROUTE = /^\/(exec|attach|portforward)\/([A-Za-z0-9_-]+)\/?(?:\?.*)?$/;
/** `ws` accepts only RFC 7230 tokens as subprotocols; the tunnel's name has a '/'. See handleWebSocket. */
const WS_PROTOCOL_ALIAS = 'x-stove-negotiated';

/** A live connection, closed by stop(). */
interface Live {
  destroy(): void;
}

/** The container or pod a stored session is for (sessions are counted per target). */
function targetOf(stored: Stored): { key: string; label: string } {
  if (stored.kind === 'portforward') return { key: `pod:${stored.params.podSandboxId}`, label: `pod "${stored.params.podSandboxId}"` };
  return { key: `container:${stored.params.containerId}`, label: `container "${stored.params.containerId}"` };
}

export class StreamingServer {
  private readonly http: Server;
  /** Made on the first WebSocket upgrade: `ws` is loaded only when a client asks for it. */
  private webSockets?: Promise<{ wss: WebSocketServer; createWebSocketStream: typeof import('ws').createWebSocketStream }>;
  private readonly tokens: TokenCache<Stored>;
  private readonly live = new Map<Live, Kind>();
  private readonly sockets = new Set<Duplex>();
  private readonly negotiated = new WeakMap<IncomingMessage, string>();
  private readonly idleTimeoutMs: number;
  private readonly streamCreationTimeoutMs: number;
  private readonly maxSessions: number;
  private readonly maxSessionsPerTarget: number;
  private readonly maxStreamsPerSession: number;
  /** Upgraded connections still open, in total and per target key. */
  private openSessions = 0;
  private readonly sessionsPerTarget = new Map<string, number>();
  private readonly log: Logger;
  private base = '';

  constructor(private readonly options: StreamingServerOptions) {
    this.log = options.log;
    this.idleTimeoutMs = options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    this.streamCreationTimeoutMs = options.streamCreationTimeoutMs ?? DEFAULT_STREAM_CREATION_TIMEOUT_MS;
    this.maxSessions = options.maxSessions ?? DEFAULT_MAX_SESSIONS;
    this.maxSessionsPerTarget = options.maxSessionsPerTarget ?? DEFAULT_MAX_SESSIONS_PER_TARGET;
    this.maxStreamsPerSession = options.maxStreamsPerSession ?? DEFAULT_MAX_STREAMS;
    this.tokens = new TokenCache({ ttlMs: options.tokenTtlMs, maxInFlight: options.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT });
    this.http = createServer((req, res) => this.onRequest(req, res));
    this.http.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => this.onUpgrade(req, socket, head));
    this.http.on('clientError', (_err, socket) => socket.destroy());
    this.http.on('connection', (socket: Duplex) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
  }

  /** The WebSocket server, made on the first WebSocket upgrade. */
  private webSocketServer() {
    this.webSockets ??= import('ws').then(({ WebSocketServer, createWebSocketStream }) => {
      const wss = new WebSocketServer({
        noServer: true,
        // Any protocol choice was made before handleUpgrade and stored under the alias (see handleWebSocket).
        handleProtocols: (protocols) => (protocols.has(WS_PROTOCOL_ALIAS) ? WS_PROTOCOL_ALIAS : false),
        perMessageDeflate: false,
        maxPayload: 16 << 20,
      });
      wss.on('headers', (headers, req) => {
        const chosen = this.negotiated.get(req);
        if (chosen === undefined) return;
        const i = headers.findIndex((h) => h.toLowerCase().startsWith('sec-websocket-protocol:'));
        if (i >= 0) headers[i] = `Sec-WebSocket-Protocol: ${chosen}`;
      });
      return { wss, createWebSocketStream };
    });
    return this.webSockets;
  }

  /** Binds the configured address and port. */
  async start(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.http.once('error', reject);
      this.http.listen({ host: this.options.address, port: this.options.port }, () => {
        this.http.off('error', reject);
        resolve();
      });
    });
    const addr = this.http.address() as AddressInfo;
    const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
    this.base = `http://${host}:${addr.port}`;
    this.log.info('streaming server listening', { url: this.base });
  }

  /** `http://host:port` of the running server. */
  get baseUrl(): string {
    if (!this.base) throw internal('streaming server not started');
    return this.base;
  }

  /** Outstanding tokens (for tests and diagnostics). */
  get outstandingTokens(): number {
    return this.tokens.size;
  }

  /** Open upgraded connections (for tests and diagnostics). */
  get sessions(): number {
    return this.openSessions;
  }

  /** Exec: checks the container, stores the session under a new token and returns its URL. */
  async exec(params: ExecParams): Promise<string> {
    const containerId = await this.checkContainer(params.containerId);
    return this.issue('exec', { kind: 'exec', params: { ...params, containerId } });
  }

  /** Attach: checks the container, stores the session under a new token and returns its URL. */
  async attach(params: AttachParams): Promise<string> {
    const containerId = await this.checkContainer(params.containerId);
    return this.issue('attach', { kind: 'attach', params: { ...params, containerId } });
  }

  /** PortForward: checks the pod, stores the session under a new token and returns its URL. */
  async portForward(params: PortForwardParams): Promise<string> {
    // Over WebSocket channels every port is two channels opened at once.
    if (params.ports.length * 2 > this.maxStreamsPerSession)
      throw invalidArgument(
        `${params.ports.length} ports is more than one connection may carry (${this.maxStreamsPerSession} streams, streaming.max_streams_per_session)`,
      );
    const podSandboxId = await this.options.lookup.sandbox(params.podSandboxId);
    if (!podSandboxId) throw notFound(`pod sandbox "${params.podSandboxId}" not found`);
    return this.issue('portforward', { kind: 'portforward', params: { ...params, podSandboxId } });
  }

  /** Stops accepting, ends every live session (their backends see the abort), frees the port. */
  async stop(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.http.close(() => resolve()));
    for (const conn of this.live.keys()) conn.destroy();
    this.live.clear();
    for (const socket of this.sockets) socket.destroy();
    void this.webSockets?.then(({ wss }) => wss.close());
    await closed;
  }

  /** The container's full id, or NOT_FOUND. */
  private async checkContainer(id: string): Promise<string> {
    const containerId = await this.options.lookup.container(id);
    if (!containerId) throw notFound(`container "${id}" not found`);
    return containerId;
  }

  /** Why one more connection for `stored` would pass a cap, or undefined when it fits. */
  private capacityProblem(stored: Stored): string | undefined {
    if (this.openSessions >= this.maxSessions)
      return `too many streaming connections: ${this.openSessions} open, the limit is ${this.maxSessions} (streaming.max_sessions)`;
    const target = targetOf(stored);
    const open = this.sessionsPerTarget.get(target.key) ?? 0;
    if (open >= this.maxSessionsPerTarget)
      return `too many streaming connections to ${target.label}: ${open} open, the limit is ${this.maxSessionsPerTarget} (streaming.max_sessions_per_container)`;
    return undefined;
  }

  private checkCapacity(stored: Stored): void {
    const problem = this.capacityProblem(stored);
    if (problem) throw new StoveError('ResourceExhausted', problem);
  }

  /** Counts an upgraded connection against the caps until its socket closes. */
  private admit(stored: Stored, socket: Duplex): void {
    const { key } = targetOf(stored);
    this.openSessions++;
    this.sessionsPerTarget.set(key, (this.sessionsPerTarget.get(key) ?? 0) + 1);
    socket.once('close', () => {
      this.openSessions--;
      const n = (this.sessionsPerTarget.get(key) ?? 1) - 1;
      if (n <= 0) this.sessionsPerTarget.delete(key);
      else this.sessionsPerTarget.set(key, n);
    });
  }

  /** Stores `stored` under a single-use token (RESOURCE_EXHAUSTED when a cap is already full). */
  private issue(kind: Kind, stored: Stored): string {
    this.checkCapacity(stored);
    const token = this.tokens.insert(stored);
    return `${this.baseUrl}/${kind}/${token}`;
  }

  // ---- HTTP ---------------------------------------------------------------------------------------

  /**
   * Resolves a request to its stored session, consuming the token (as the kubelet does, even when
   * the upgrade then fails). Returns an HTTP error otherwise.
   */
  private route(req: IncomingMessage): { stored: Stored } | { code: number; message: string } {
    const m = ROUTE.exec(req.url ?? '');
    if (!m) return { code: 404, message: '404 page not found' };
    if (req.method !== 'GET' && req.method !== 'POST') return { code: 405, message: 'method not allowed' };
    const stored = this.tokens.consume(m[2]!);
    if (!stored || stored.kind !== m[1]) return { code: 404, message: '404 page not found' };
    return { stored };
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    const r = this.route(req);
    const [code, message] = 'code' in r ? [r.code, r.message] : [400, 'unable to upgrade: missing upgrade headers in request'];
    res.writeHead(code, { 'Content-Type': 'text/plain; charset=utf-8', 'X-Content-Type-Options': 'nosniff' });
    res.end(message + '\n');
  }

  private onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    const r = this.route(req);
    if ('code' in r) return rejectUpgrade(socket, r.code, r.message);
    const problem = this.capacityProblem(r.stored);
    if (problem) {
      this.log.warn('streaming connection refused', { problem });
      return rejectUpgrade(socket, 429, problem);
    }
    this.admit(r.stored, socket);
    try {
      if (wantsWebSocket(req)) this.handleWebSocket(req, socket, head, r.stored);
      else if (wantsSpdy(req)) this.handleSpdy(req, socket, head, r.stored);
      else rejectUpgrade(socket, 400, 'unable to upgrade: missing upgrade headers in request');
    } catch (err) {
      this.log.error('streaming upgrade failed', { error: messageOf(err) });
      rejectUpgrade(socket, 500, 'internal error');
    }
  }

  private track(conn: Live, kind: Kind, whenClosed: (cb: () => void) => void): void {
    this.live.set(conn, kind);
    whenClosed(() => this.live.delete(conn));
  }

  /** Live sessions by kind (exec, attach, portforward). */
  sessionsByKind(): Record<Kind, number> {
    const counts: Record<Kind, number> = { exec: 0, attach: 0, portforward: 0 };
    for (const kind of this.live.values()) counts[kind]++;
    return counts;
  }

  private handleSpdy(req: IncomingMessage, socket: Duplex, head: Buffer, stored: Stored): void {
    const offered = headerValues(req.headers[PROTOCOL_HEADER]);
    const supported = stored.kind === 'portforward' ? SPDY_PORTFORWARD_PROTOCOLS : SPDY_COMMAND_PROTOCOLS;
    if (offered.length === 0) return rejectUpgrade(socket, 400, `unable to upgrade: ${PROTOCOL_HEADER} is required`);
    const protocol = negotiate(offered, supported);
    if (!protocol) {
      return rejectUpgrade(
        socket,
        403,
        `unable to upgrade: unable to negotiate protocol: client supports [${offered.join(' ')}], server accepts [${supported.join(' ')}]`,
        supported.map((p) => ['X-Accepted-Stream-Protocol-Versions', p]),
      );
    }
    acceptSpdyUpgrade(socket, protocol);
    const log = this.log.child({ stream: stored.kind, transport: 'spdy', protocol });
    const session =
      stored.kind === 'portforward'
        ? servePortForward(socket, {
            podSandboxId: stored.params.podSandboxId,
            idleTimeoutMs: this.idleTimeoutMs,
            streamCreationTimeoutMs: this.streamCreationTimeoutMs,
            maxStreams: this.maxStreamsPerSession,
            head,
            backend: this.options.backend,
            log,
          })
        : serveSpdyCommand(socket, stored, {
            version: commandProtocolVersion(protocol),
            idleTimeoutMs: this.idleTimeoutMs,
            streamCreationTimeoutMs: this.streamCreationTimeoutMs,
            head,
            backend: this.options.backend,
            log,
          });
    this.track(session, stored.kind, (cb) => session.onClose(cb));
  }

  private handleWebSocket(req: IncomingMessage, socket: Duplex, head: Buffer, stored: Stored): void {
    const offered = headerValues(req.headers['sec-websocket-protocol']);
    const supported = stored.kind === 'portforward' ? WS_PORTFORWARD_PROTOCOLS : WS_COMMAND_PROTOCOLS;
    const protocol = offered.length === 0 ? '' : negotiate(offered, supported);
    if (protocol === undefined) {
      return rejectUpgrade(
        socket,
        403,
        `unable to upgrade: unable to negotiate protocol: client supports [${offered.join(' ')}], server accepts [${supported.join(' ')}]`,
      );
    }
    if (stored.kind === 'portforward' && protocol !== WS_SPDY_TUNNEL_PROTOCOL && stored.params.ports.length === 0) {
      return rejectUpgrade(socket, 400, 'port forwarding over WebSocket channels needs the ports in the PortForward request');
    }
    // `ws` refuses a Sec-WebSocket-Protocol with a '/' in it (SPDY/3.1+portforward.k8s.io), so it is
    // handed an alias, and the real name goes back into the response headers ('headers' event).
    if (protocol === '') delete req.headers['sec-websocket-protocol'];
    else {
      req.headers['sec-websocket-protocol'] = WS_PROTOCOL_ALIAS;
      this.negotiated.set(req, protocol);
    }
    this.webSocketServer().then(
      ({ wss, createWebSocketStream }) => wss.handleUpgrade(req, socket, head, (ws: WebSocket) => {
        const log = this.log.child({ stream: stored.kind, transport: 'websocket', protocol });
        const serveOptions = { idleTimeoutMs: this.idleTimeoutMs, backend: this.options.backend, log };
        if (stored.kind !== 'portforward') {
          const conn = serveWsCommand(ws, protocol, stored, serveOptions);
          this.track(conn, stored.kind, (cb) => ws.once('close', cb));
        } else if (protocol === WS_SPDY_TUNNEL_PROTOCOL) {
          const session = servePortForward(createWebSocketStream(ws), {
            podSandboxId: stored.params.podSandboxId,
            idleTimeoutMs: this.idleTimeoutMs,
            streamCreationTimeoutMs: this.streamCreationTimeoutMs,
            maxStreams: this.maxStreamsPerSession,
            backend: this.options.backend,
            log,
          });
          this.track({ destroy: () => session.destroy() }, 'portforward', (cb) => session.onClose(cb));
        } else {
          const conn = serveWsPortForward(ws, protocol, stored.params.podSandboxId, stored.params.ports, serveOptions);
          this.track(conn, 'portforward', (cb) => ws.once('close', cb));
        }
      }),
      (err: unknown) => {
        this.log.error('cannot load the WebSocket server', { error: String(err) });
        socket.destroy();
      },
    );
  }
}
