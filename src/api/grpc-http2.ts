/**
 * gRPC over HTTP/2 on `node:http2`, server side, for unary and server-streaming calls (all the CRI
 * has): one length-prefixed request message, then messages and a status in trailers, or a
 * Trailers-Only answer for an error before any message. No compression (identity only), no
 * client-streaming, no reflection or health service. A leaner path than a general gRPC server: the
 * kubelet polls the status RPCs, and per call the transport was most of their cost. HTTP/2 itself
 * (framing, HPACK, flow control, RFC 9113 §8's checks of a request) is nghttp2's, through node:http2.
 *
 * Every byte of a request is hostile: a message's size is checked from its prefix before it is
 * buffered, the request bytes a connection buffers are bounded, anything malformed gets an error
 * status on its stream, and nothing one stream or session does can throw out of here.
 */
import http2, { type IncomingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import { EventEmitter } from 'node:events';
import { status } from '@grpc/grpc-js';
import { StoveError } from '../common/errors.js';

/** A call's request headers as gRPC metadata (lower-case keys, values as sent). */
export interface CallMetadata {
  get(key: string): string[];
}

/** A gRPC status with its message, as a call ends. */
export interface CallStatus {
  code: status;
  details: string;
}

/**
 * A unary call: its request, metadata and a signal aborted when the client leaves or the deadline passes
 * (its reason a StoveError, Cancelled or DeadlineExceeded, saying which).
 */
export interface UnaryCall {
  readonly request: unknown;
  /** The request message as it came, for a field the decoded message cannot keep as sent (see CallContext). */
  readonly requestBytes: Buffer;
  readonly metadata: CallMetadata;
  readonly signal: AbortSignal;
}

export type UnaryCallback = (err: CallStatus | null, response?: unknown) => void;
export type UnaryImplementation = (call: UnaryCall, callback: UnaryCallback) => void;

/**
 * A server-streaming call. Emits 'close' once (client gone, deadline passed, or the call ended) and
 * 'drain' when the transport wants more after write returned false.
 */
export interface ServerStreamCall extends UnaryCall, EventEmitter {
  write(message: unknown): boolean;
  readonly writableNeedDrain: boolean;
  /** Sends the response headers now (an open-ended stream tells the client it is live). */
  sendHeaders(): void;
  /** Ends the call with OK. */
  end(): void;
  /** Ends the call with `err`. */
  fail(err: CallStatus): void;
}

export type ServerStreamImplementation = (call: ServerStreamCall) => void;

/** One RPC as the transport serves it. */
export interface Route {
  readonly responseStream: boolean;
  readonly decode: (bytes: Buffer) => unknown;
  readonly encode: (message: unknown) => Buffer;
  readonly handler: UnaryImplementation | ServerStreamImplementation;
}

export interface TransportLimits {
  maxReceiveBytes: number;
  maxSendBytes: number;
  /**
   * How long the request message (and the end of the request) may take to arrive after its headers.
   * A call has its handler run only once its request is complete, so a client that stalls the body
   * would otherwise hold its stream until it leaves; grpc-timeout may be shorter, never longer.
   */
  requestTimeoutMs: number;
  /**
   * How long a response may wait for the client to take more of it (HTTP/2 flow control) before the
   * stream is reset: a client that never reads would otherwise keep its answers buffered here.
   */
  responseStallMs: number;
}

/**
 * What the calls of one connection hold, counted here where node:http2 does not: calls whose stream is
 * open or whose handler's work still runs (a stream the client reset counts until its handler ends, so
 * resetting each stream at once, "rapid reset", starts no more work than the streams a connection may
 * have open), and request bytes buffered for calls whose handler has not run yet (nghttp2 gives a
 * stream's window back as its data is read, so without this a connection's open streams could each
 * buffer a whole message).
 */
export class ConnectionCalls {
  /** Calls counted against maxCalls. */
  active = 0;
  /** Request message bytes reserved from their prefixes and not yet handed to a handler. */
  requestBytes = 0;
  /** Streams open (for the connection's idle rules: one with a stream open is never idle). */
  openStreams = 0;
  /** Whether a stream was ever opened. */
  called = false;
  /** performance.now() when the last open stream closed (or the connection was made). */
  quietSince = performance.now();

  constructor(
    readonly maxCalls: number,
    readonly maxRequestBytes: number,
  ) {}

  streamOpened(): void {
    this.openStreams++;
    this.called = true;
  }

  streamClosed(): void {
    if (--this.openStreams === 0) this.quietSince = performance.now();
  }
}

const PREFIX_BYTES = 5;
const MAX_TIMER_MS = 2 ** 31 - 1;
const { HTTP2_HEADER_STATUS, HTTP2_HEADER_CONTENT_TYPE, HTTP2_HEADER_METHOD, HTTP2_HEADER_PATH, NGHTTP2_NO_ERROR, NGHTTP2_CANCEL, NGHTTP2_REFUSED_STREAM } =
  http2.constants;

/** `grpc-message`: percent-encoded UTF-8, everything outside printable ASCII and '%' escaped (the gRPC spec). */
export function encodeGrpcMessage(message: string): string {
  let out = '';
  for (const byte of Buffer.from(message, 'utf8')) {
    out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

const TIMEOUT_UNITS_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

/** The deadline in ms from a `grpc-timeout` header (`<1–8 digits><H|M|S|m|u|n>`), undefined if malformed. */
export function parseGrpcTimeout(value: string): number | undefined {
  const m = /^(\d{1,8})([HMSmun])$/.exec(value);
  return m ? Number(m[1]) * TIMEOUT_UNITS_MS[m[2]!]! : undefined;
}

/**
 * A client's header value as an error message quotes it: a valid grpc-timeout is at most 9 characters,
 * so 32 show what was wrong without echoing kilobytes a client sent back to it (and into the logs).
 */
function quoteShort(value: string): string {
  return value.length <= 32 ? value : `${value.slice(0, 32)}… (${value.length} characters)`;
}

/** A message with its 5-byte gRPC prefix (uncompressed). */
function framed(bytes: Buffer): Buffer {
  const out = Buffer.allocUnsafe(PREFIX_BYTES + bytes.length);
  out[0] = 0;
  out.writeUInt32BE(bytes.length, 1);
  bytes.copy(out, PREFIX_BYTES);
  return out;
}

/** A stream error (the peer reset it, the session died) must never reach the process. */
const ignoreStreamError = () => {};
const NO_BYTES = Buffer.alloc(0);

function metadataOf(headers: IncomingHttpHeaders): CallMetadata {
  return {
    get(key) {
      const v = headers[key.toLowerCase()];
      return v === undefined ? [] : Array.isArray(v) ? v : [v];
    },
  };
}

/**
 * The transport's long limits (a request body that does not arrive, an answer the client does not take)
 * checked by one sweep for every call instead of a timer per call: arming and clearing Node timers
 * twice per call was a measurable part of a status call's cost. A limit fires at most one period late;
 * the sweep runs only while some call is watched.
 */
export class Watchdog {
  private readonly due = new Map<object, { at: number; fire: () => void }>();
  private timer: NodeJS.Timeout | undefined;

  constructor(readonly periodMs: number) {}

  /** The watchdog for a server's limits: its period a tenth of the shorter one (10 ms to 1 s). */
  static forLimits(limits: TransportLimits): Watchdog {
    return new Watchdog(Math.min(1000, Math.max(10, Math.min(limits.requestTimeoutMs, limits.responseStallMs) / 10)));
  }

  /** Calls `fire` once `ms` have passed (up to one period later) unless `cancel(key)` comes first. */
  watch(key: object, ms: number, fire: () => void): void {
    this.due.set(key, { at: performance.now() + ms, fire });
    this.timer ??= setInterval(() => this.sweep(), this.periodMs).unref();
  }

  cancel(key: object): void {
    this.due.delete(key);
  }

  has(key: object): boolean {
    return this.due.has(key);
  }

  /** Whether the sweep timer runs (only while something is watched, and one period after). */
  get sweeping(): boolean {
    return this.timer !== undefined;
  }

  private sweep(): void {
    const now = performance.now();
    for (const [key, entry] of this.due) {
      if (entry.at > now) continue;
      this.due.delete(key);
      try {
        entry.fire();
      } catch {
        // A limit ends one call; whatever goes wrong ending it must not skip the others or reach the process.
      }
    }
    if (this.due.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }
}

const isGrpcContentType = (ct: string | undefined) => ct !== undefined && /^application\/grpc(?:[+;]|$)/.test(ct);

/** One call on one HTTP/2 stream: reads the request, answers with messages and a status exactly once. */
class Call extends EventEmitter implements ServerStreamCall {
  request: unknown;
  requestBytes: Buffer = NO_BYTES;
  private metadataView: CallMetadata | undefined;
  private abortController: AbortController | undefined;
  private abortReason: StoveError | undefined;
  private headersSent = false;
  private finished = false;
  private trailers: CallStatus = { code: status.OK, details: '' };
  private deadline: NodeJS.Timeout | undefined;
  /** Keys of this call's entries in the watchdog. */
  private readonly requestWait = {};
  private readonly responseWait = {};
  private readonly answerWait = {};

  /** The stream's one 'close' listener (serveStream's) calls closed(). */
  constructor(
    private readonly stream: ServerHttp2Stream,
    private readonly headers: IncomingHttpHeaders,
    private readonly limits: TransportLimits,
    private readonly watchdog: Watchdog,
    private readonly encode: (message: unknown) => Buffer,
  ) {
    super();
  }

  /** Made on first use, as the signal: only tracing reads it. */
  get metadata(): CallMetadata {
    return (this.metadataView ??= metadataOf(this.headers));
  }

  get isFinished(): boolean {
    return this.finished;
  }

  /** Made on first use: most handlers never look at it, and the kubelet polls often. */
  get signal(): AbortSignal {
    if (!this.abortController) {
      this.abortController = new AbortController();
      if (this.abortReason) this.abortController.abort(this.abortReason);
    }
    return this.abortController.signal;
  }

  private abort(reason: StoveError): void {
    this.abortReason = reason;
    this.abortController?.abort(reason);
  }

  get writableNeedDrain(): boolean {
    return this.stream.writableNeedDrain;
  }

  setDeadline(ms: number): void {
    this.deadline = setTimeout(() => this.fail({ code: status.DEADLINE_EXCEEDED, details: 'Deadline exceeded' }), ms);
  }

  /** Fails the call unless requestArrived() is called within `ms`. */
  setRequestDeadline(ms: number): void {
    this.watchdog.watch(this.requestWait, ms, () =>
      this.fail({ code: status.DEADLINE_EXCEEDED, details: `the request message did not arrive within ${ms / 1000}s of its headers` }),
    );
  }

  requestArrived(): void {
    this.watchdog.cancel(this.requestWait);
  }

  /** Resets the stream unless the client takes what is buffered for it within responseStallMs. */
  private watchResponseStall(): void {
    if (this.watchdog.has(this.responseWait)) return;
    const stream = this.stream;
    this.watchdog.watch(this.responseWait, this.limits.responseStallMs, () => {
      if (!stream.closed && !stream.destroyed) stream.close(NGHTTP2_CANCEL);
    });
    stream.once('drain', () => this.watchdog.cancel(this.responseWait));
  }

  sendHeaders(): void {
    if (this.headersSent || this.finished || this.stream.destroyed) return;
    this.headersSent = true;
    // The trailers are asked for only where headers went first (a Trailers-Only answer has none).
    this.stream.on('wantTrailers', () => {
      const { code, details } = this.trailers;
      const trailers: Record<string, string> = { 'grpc-status': String(code) };
      if (details) trailers['grpc-message'] = encodeGrpcMessage(details);
      this.stream.sendTrailers(trailers);
    });
    this.stream.respond([HTTP2_HEADER_STATUS, '200', HTTP2_HEADER_CONTENT_TYPE, 'application/grpc'], { waitForTrailers: true });
  }

  write(message: unknown): boolean {
    if (this.finished || this.stream.destroyed) return false;
    const bytes = this.encodeChecked(message);
    if (!bytes) return false;
    this.sendHeaders();
    const more = this.stream.write(framed(bytes));
    if (!more) this.watchResponseStall();
    return more;
  }

  /** A unary answer: one message and OK, in one go. */
  reply(message: unknown): void {
    if (this.finished || this.stream.destroyed) return;
    const bytes = this.encodeChecked(message);
    if (!bytes) return;
    this.sendHeaders();
    this.finish({ code: status.OK, details: '' }, framed(bytes));
  }

  /** The message's bytes, or undefined after failing the call when it cannot be encoded or is too large. */
  private encodeChecked(message: unknown): Buffer | undefined {
    let bytes: Buffer;
    try {
      bytes = this.encode(message);
    } catch (err) {
      this.fail({ code: status.INTERNAL, details: `failed to encode the response: ${(err as Error).message}` });
      return undefined;
    }
    if (bytes.length > this.limits.maxSendBytes) {
      this.fail({ code: status.RESOURCE_EXHAUSTED, details: `Sent message larger than max (${bytes.length} vs. ${this.limits.maxSendBytes})` });
      return undefined;
    }
    return bytes;
  }

  end(): void {
    this.finish({ code: status.OK, details: '' });
  }

  fail(err: CallStatus): void {
    this.finish(err);
  }

  private finish(result: CallStatus, last?: Buffer): void {
    if (this.finished) return;
    this.finished = true;
    clearTimeout(this.deadline);
    this.watchdog.cancel(this.requestWait);
    const stream = this.stream;
    if (!stream.destroyed && !stream.closed) {
      if (this.headersSent) {
        this.trailers = result;
        if (last) stream.end(last);
        else stream.end();
        // Until the stream closes (the client took the answer and its trailers), however small the
        // answer: one that waits for a window the client never opens would otherwise stay.
        const closeStream = () => {
          if (!stream.closed && !stream.destroyed) stream.close(NGHTTP2_CANCEL);
        };
        this.watchdog.watch(this.answerWait, this.limits.responseStallMs, closeStream);
      } else {
        // Trailers-Only: the status in the one and only HEADERS frame.
        const headers = [HTTP2_HEADER_STATUS, '200', HTTP2_HEADER_CONTENT_TYPE, 'application/grpc', 'grpc-status', String(result.code)];
        if (result.details) headers.push('grpc-message', encodeGrpcMessage(result.details));
        stream.respond(headers, { endStream: true });
        // Whatever the client still sends is not wanted: once the answer is out, the stream is reset
        // with NO_ERROR (as HTTP/2 allows a server that answered before the request ended).
        if (!stream.readableEnded) stream.once('finish', () => stream.close(NGHTTP2_NO_ERROR));
      }
    }
    if (result.code !== status.OK) {
      const kind = result.code === status.DEADLINE_EXCEEDED ? 'DeadlineExceeded' : 'Cancelled';
      this.abort(new StoveError(kind, `the call ended: ${result.details}`));
    }
    this.emit('close');
  }

  closed(): void {
    clearTimeout(this.deadline);
    this.watchdog.cancel(this.requestWait);
    this.watchdog.cancel(this.responseWait);
    this.watchdog.cancel(this.answerWait);
    if (!this.finished) {
      // The client went away (RST_STREAM or the connection closed) before the call ended.
      this.finished = true;
      this.abort(new StoveError('Cancelled', 'the client went away'));
      this.emit('close');
    }
  }
}

/**
 * Answers one HTTP/2 stream as a gRPC call to the route its `:path` names; `watchdog` (one per server,
 * Watchdog.forLimits) checks its request-arrival and response-stall limits, `calls` (one per
 * connection) counts it until both its stream and its handler's work have ended.
 */
export function serveStream(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  routes: ReadonlyMap<string, Route>,
  limits: TransportLimits,
  watchdog: Watchdog,
  calls: ConnectionCalls,
): void {
  stream.on('error', ignoreStreamError);
  calls.streamOpened();
  if (calls.active >= calls.maxCalls) {
    // Only streams closed while their handler works get here (nghttp2 refuses open streams beyond
    // SETTINGS_MAX_CONCURRENT_STREAMS itself).
    stream.once('close', () => calls.streamClosed());
    stream.close(NGHTTP2_REFUSED_STREAM);
    return;
  }
  calls.active++;
  // Two holds on the call's place: its stream, and its handler's work (or the lack of one).
  let holds = 2;
  const release = () => {
    if (--holds === 0) calls.active--;
  };
  const request: RequestHold = { calls, bytes: 0, call: undefined };
  // The stream's only 'close' listener: per call, listeners were a measurable part of a status call.
  stream.once('close', () => {
    unhold(request);
    release();
    request.call?.closed();
    calls.streamClosed();
  });
  if (!serveCall(stream, headers, routes, limits, watchdog, request, release)) release();
}

/** The request bytes one call holds of its connection's budget (ConnectionCalls.requestBytes). */
interface RequestHold {
  readonly calls: ConnectionCalls;
  bytes: number;
  /** The call, once made (told when its stream closes). */
  call: Call | undefined;
}

function unhold(hold: RequestHold): void {
  hold.calls.requestBytes -= hold.bytes;
  hold.bytes = 0;
}

/**
 * The call's checks, then its request and handler. Returns false when no handler was started (the
 * call was answered here); `workDone` runs once when a started handler's work ends.
 */
function serveCall(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  routes: ReadonlyMap<string, Route>,
  limits: TransportLimits,
  watchdog: Watchdog,
  request: RequestHold,
  workDone: () => void,
): boolean {
  if (headers[HTTP2_HEADER_METHOD] !== 'POST') {
    stream.respond({ [HTTP2_HEADER_STATUS]: 405, allow: 'POST' }, { endStream: true });
    return false;
  }
  if (!isGrpcContentType(headers[HTTP2_HEADER_CONTENT_TYPE] as string | undefined)) {
    stream.respond({ [HTTP2_HEADER_STATUS]: 415 }, { endStream: true });
    return false;
  }
  const path = String(headers[HTTP2_HEADER_PATH] ?? '');
  const route = routes.get(path);
  const call = new Call(stream, headers, limits, watchdog, route ? route.encode : () => NO_BYTES);
  request.call = call;
  const refuse = (err: CallStatus) => {
    call.fail(err);
    return false;
  };
  if (!route) return refuse({ code: status.UNIMPLEMENTED, details: `unknown method ${path}` });
  const encoding = headers['grpc-encoding'] as string | undefined;
  if (encoding !== undefined && encoding !== 'identity') {
    return refuse({ code: status.UNIMPLEMENTED, details: `grpc-encoding "${String(encoding)}" is not supported; use identity` });
  }
  const timeout = headers['grpc-timeout'];
  if (timeout !== undefined) {
    const ms = parseGrpcTimeout(String(timeout));
    // INTERNAL, as grpc-go (operateHeaders) and grpc-js answer a malformed grpc-timeout.
    if (ms === undefined) return refuse({ code: status.INTERNAL, details: `malformed grpc-timeout "${quoteShort(String(timeout))}"` });
    // Beyond what a timer can hold (about 24 days) is no deadline in practice.
    if (ms <= MAX_TIMER_MS) call.setDeadline(ms);
  }
  call.setRequestDeadline(limits.requestTimeoutMs);
  readOneMessage(stream, limits.maxReceiveBytes, request, (err, bytes) => {
    unhold(request);
    call.requestArrived();
    if (err) return endWithout(err);
    if (call.isFinished) return endWithout(); // the deadline passed or the client left while the request arrived
    try {
      call.requestBytes = bytes!;
      call.request = route.decode(bytes!);
    } catch (e) {
      return endWithout({ code: status.INTERNAL, details: `failed to parse the request: ${(e as Error).message}` });
    }
    try {
      if (route.responseStream) {
        stream.on('drain', () => call.emit('drain'));
        call.once('close', workDone);
        (route.handler as ServerStreamImplementation)(call);
      } else {
        (route.handler as UnaryImplementation)(call, (err, response) => {
          workDone();
          if (err) call.fail(err);
          else call.reply(response);
        });
      }
    } catch (e) {
      workDone();
      call.fail({ code: status.INTERNAL, details: (e as Error).message ?? String(e) });
    }
  });
  /** The request did not reach a handler: the call ends (with `err`, unless it already has) and its work hold goes. */
  function endWithout(err?: CallStatus): void {
    workDone();
    if (err) call.fail(err);
  }
  return true;
}

/**
 * Reads exactly one length-prefixed message and the end of the request. The size comes from the
 * prefix and is checked before anything is buffered.
 */
function readOneMessage(
  stream: ServerHttp2Stream,
  maxBytes: number,
  hold: RequestHold,
  done: (err: CallStatus | null, message?: Buffer) => void,
): void {
  let prefix: Buffer | undefined;
  const parts: Buffer[] = [];
  let have = 0;
  let need = -1;
  let complete = false;
  let over = false;
  const stop = (err: CallStatus) => {
    over = true;
    stream.off('data', onData);
    done(err);
  };
  const onData = (chunk: Buffer) => {
    if (complete) return stop({ code: status.INTERNAL, details: 'more than one request message for a unary or server-streaming call' });
    if (need < 0) {
      prefix = prefix ? Buffer.concat([prefix, chunk]) : chunk;
      if (prefix.length < PREFIX_BYTES) return;
      const flag = prefix[0]!;
      if (flag === 1) return stop({ code: status.INTERNAL, details: 'compressed request message without a grpc-encoding' });
      if (flag !== 0) return stop({ code: status.INTERNAL, details: `malformed message prefix (flag ${flag})` });
      need = prefix.readUInt32BE(1);
      if (need > maxBytes) return stop({ code: status.RESOURCE_EXHAUSTED, details: `Received message larger than max (${need} vs. ${maxBytes})` });
      const calls = hold.calls;
      if (calls.requestBytes + need > calls.maxRequestBytes) {
        return stop({
          code: status.RESOURCE_EXHAUSTED,
          details: `the request messages in flight on this connection would exceed ${calls.maxRequestBytes >> 20} MiB; retry once others are answered`,
        });
      }
      calls.requestBytes += need;
      hold.bytes = need;
      chunk = prefix.subarray(PREFIX_BYTES);
      prefix = undefined;
    }
    if (have + chunk.length > need) {
      return stop({ code: status.INTERNAL, details: 'more than one request message for a unary or server-streaming call' });
    }
    if (chunk.length > 0) parts.push(chunk);
    have += chunk.length;
    if (have === need) complete = true;
  };
  stream.on('data', onData);
  stream.once('end', () => {
    if (over) return;
    if (!complete) return done({ code: status.INTERNAL, details: need < 0 && !prefix ? 'the request has no message' : 'the request ended inside a message' });
    done(null, parts.length === 1 ? parts[0] : Buffer.concat(parts, have));
  });
}
