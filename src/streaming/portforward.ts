/**
 * Port-forward over SPDY (directly after the HTTP upgrade, or tunnelled through a WebSocket). Every
 * TCP connection the client accepts becomes two client streams with headers `streamtype` (error, then
 * data), `port` and `requestid`; a complete pair is handed to the backend, which dials the port inside
 * the pod. A failure goes to that pair's error stream as `{"closeConnection":…,"message":…}`; the
 * session and its other connections carry on. A pair still incomplete after the stream creation
 * timeout gets a text error.
 */
import type { Duplex } from 'node:stream';
import type { Logger } from '../common/logger.js';
import { messageOf } from '../common/errors.js';
import type { StreamingBackend } from './backend.js';
import { SpdySession, type SpdyStream } from './spdy.js';
import { encodePortForwardError } from './status.js';

export interface PortForwardOptions {
  podSandboxId: string;
  idleTimeoutMs: number;
  streamCreationTimeoutMs: number;
  /** Open streams at most on the connection (two per forwarded TCP connection). */
  maxStreams: number;
  head?: Buffer;
  backend: StreamingBackend;
  log: Logger;
}

interface Pair {
  requestId: string;
  error?: SpdyStream;
  data?: SpdyStream;
  timer: NodeJS.Timeout;
}

/** A port header value as a port, or undefined unless it is an integer in 1–65535. */
export function parsePort(value: string): number | undefined {
  if (!/^\d{1,5}$/.test(value)) return undefined;
  const port = Number(value);
  return port >= 1 && port <= 65535 ? port : undefined;
}

/** The errno-style code of an error or of its causes. */
function errorCode(err: unknown): string | undefined {
  for (let e = err; e instanceof Error; e = e.cause) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code) return code;
  }
  return undefined;
}

/** Serves port-forward on `transport` (an upgraded socket or a WebSocket stream). */
export function servePortForward(transport: Duplex, options: PortForwardOptions): SpdySession {
  const pairs = new Map<string, Pair>();
  const { log } = options;

  const printError = (pair: Pair, message: string) => {
    if (pair.error && pair.error.writable) pair.error.write(message);
  };

  const forward = async (pair: Pair) => {
    const data = pair.data!;
    const error = pair.error!;
    const port = parsePort(data.header('port'))!;
    try {
      await options.backend.portForward(options.podSandboxId, port, data, session.signal);
    } catch (err) {
      const code = errorCode(err);
      // A peer that reset or stopped reading is the remote program's business; anything else ends the session.
      const recoverable = code === 'EPIPE' || code === 'ECONNRESET';
      const message = `error forwarding port ${port} to pod ${options.podSandboxId}, uid : ${messageOf(err)}`;
      log.warn('port forward failed', { podSandboxId: options.podSandboxId, port, requestId: pair.requestId, error: messageOf(err) });
      if (error.writable) error.write(encodePortForwardError(message, !recoverable));
    }
    error.end();
    data.end();
  };

  const onStream = (stream: SpdyStream) => {
    const portValue = stream.header('port');
    const type = stream.header('streamtype');
    if (parsePort(portValue) === undefined || (type !== 'error' && type !== 'data')) {
      log.debug('refusing port-forward stream', { port: portValue, streamType: type });
      stream.refuse();
      return;
    }
    stream.reply();
    // Old clients send no request id; pair by stream id as the kubelet does (error n, data n+2).
    const requestId = stream.header('requestid') || String(type === 'error' ? stream.id : stream.id - 2);
    let pair = pairs.get(requestId);
    if (!pair) {
      const created: Pair = {
        requestId,
        timer: setTimeout(() => {
          pairs.delete(requestId);
          printError(created, `timed out waiting for streams of request ${requestId}`);
          created.error?.end();
          created.data?.end();
        }, options.streamCreationTimeoutMs),
      };
      pair = created;
      pairs.set(requestId, pair);
    }
    if (pair[type]) {
      printError(pair, `error processing stream for request ${requestId}: ${type} stream already assigned`);
      stream.destroy();
      return;
    }
    pair[type] = stream;
    // The client half-closes its error stream at once and never writes to it.
    if (type === 'error') stream.resume();
    if (pair.error && pair.data) {
      clearTimeout(pair.timer);
      pairs.delete(requestId);
      void forward(pair);
    }
  };

  const session = new SpdySession(transport, {
    onStream,
    idleTimeoutMs: options.idleTimeoutMs,
    head: options.head,
    onProblem: (problem) => log.warn('port-forward connection closed', { problem }),
    maxStreams: options.maxStreams,
    onStreamCapped: (limit) =>
      log.warn('port-forward stream refused', { podSandboxId: options.podSandboxId, problem: `${limit} streams open (streaming.max_streams_per_session)` }),
  });
  session.onClose(() => {
    for (const pair of pairs.values()) clearTimeout(pair.timer);
    pairs.clear();
  });
  return session;
}
