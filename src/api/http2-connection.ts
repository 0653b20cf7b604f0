/**
 * The server side of one HTTP/2 connection (RFC 9113), as much of it as a gRPC server needs: streams
 * opened by the client with HEADERS, request bodies in DATA, answers as HEADERS, DATA and trailing
 * HEADERS, flow control both ways, SETTINGS, PING, RST_STREAM and GOAWAY. No server push, no
 * priorities (PRIORITY is read and ignored), no HTTP/1.1 upgrade.
 *
 * Why not node:http2: a unary gRPC answer there leaves in two writes a loop turn apart (DATA, then
 * the trailers from a setImmediate), each call crossing into C++ several times; here the frames a
 * call produces in one turn leave in one writev. The kubelet polls the status RPCs, and per call the
 * transport was most of their cost.
 *
 * Everything from the peer is hostile: frames are bounded (SETTINGS_MAX_FRAME_SIZE), header blocks
 * (MAX_HEADER_BLOCK_BYTES) and header lists (maxHeaderListBytes) too, request bodies by the flow-control
 * windows we grant, and answers the peer does not take wait in the stream (never in the socket beyond
 * SOCKET_HIGH_WATER) where the caller's stall limit can reset them. A protocol violation ends the
 * connection with GOAWAY and its code; nothing here throws out of a socket callback.
 */
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { HpackDecoder, HpackError, encodeHeaderBlock } from './hpack.js';
import {
  CLIENT_PREFACE,
  ConnectionError,
  DEFAULT_MAX_FRAME_SIZE,
  DEFAULT_WINDOW,
  FLAG,
  FRAME,
  FrameReader,
  H2_ERROR,
  MAX_ALLOWED_FRAME_SIZE,
  MAX_WINDOW,
  SETTING,
  StreamError,
  dataFrameHeader,
  frame,
  goawayFrame,
  headersFrames,
  rstStreamFrame,
  settingsFrame,
  windowUpdateFrame,
} from './http2-frames.js';

export type HeaderFields = ReadonlyArray<readonly [string, string]>;
/** A request's header fields by lower-case name; a name sent more than once has all its values. */
export type RequestHeaders = Record<string, string | string[]>;

export interface ConnectionOptions {
  /** SETTINGS_MAX_CONCURRENT_STREAMS: more open streams are refused (REFUSED_STREAM). */
  maxConcurrentStreams: number;
  /** SETTINGS_MAX_HEADER_LIST_SIZE: a request with more (RFC 9113 §6.5.2 size) is marked headersTooLarge. */
  maxHeaderListBytes: number;
  /** The largest request body a stream may send (its flow-control window; we never widen it). */
  maxStreamBodyBytes: number;
  /**
   * Request bytes buffered on the connection at most (the connection's flow-control window), and answer
   * bytes waiting in its streams beyond which new streams are refused.
   */
  maxConnectionMemoryBytes: number;
  onStream: (stream: ServerStream, headers: RequestHeaders) => void;
  /** A protocol error that ended the connection, for the log. */
  onError?: (err: Error) => void;
}

/** A header block may span frames (CONTINUATION); beyond this much the connection ends (no decoder can use it). */
const MAX_HEADER_BLOCK_BYTES = 64 << 10;
/** DATA is written while the socket holds less than this; the rest waits in its stream for 'drain'. */
const SOCKET_HIGH_WATER = 256 << 10;
/**
 * Bytes the socket may hold unread by the peer before the connection is dropped: only control frames
 * (PING and SETTINGS acknowledgements, headers, resets) get past SOCKET_HIGH_WATER, so a peer that
 * floods them without reading reaches this.
 */
const SOCKET_HARD_LIMIT = 8 << 20;
/** A stream's answer bytes waiting beyond which write() says to wait for 'drain'. */
const STREAM_HIGH_WATER = 64 << 10;
const NO_PAYLOAD = Buffer.alloc(0);
/** How long a connection we ended may take to flush its last frames before its socket is destroyed. */
const ENDING_GRACE_MS = 10_000;

/** Header fields, or a block already encoded (encodeHeaderBlock) for answers that never change. */
export type HeaderBlock = HeaderFields | Buffer;
const encodeBlock = (block: HeaderBlock): Buffer => (Buffer.isBuffer(block) ? block : encodeHeaderBlock(block));

/**
 * One stream: the request as it arrives (onData, onEnd) and the answer (respond, write, end, reset).
 * onClose runs once when the stream is done: answered and the request ended, reset by either side, or
 * the connection gone (the caller knows from its own state whether it had finished its answer).
 */
export class ServerStream {
  onData: ((chunk: Buffer) => void) | undefined;
  onEnd: (() => void) | undefined;
  onDrain: (() => void) | undefined;
  onClose: (() => void) | undefined;
  /** The request's header list was larger than allowed; its fields are cut short. */
  headersTooLarge = false;
  /** The caller's work for this stream runs (workStarted until workDone). */
  private working = false;
  remoteEnded = false;
  private localEnded = false;
  private headersSent = false;
  private _closed = false;
  /** Answer bytes not yet sent (flow control or socket backpressure), and the trailers after them. */
  private readonly queue: Buffer[] = [];
  private queued = 0;
  private trailers: Buffer | undefined;
  private needDrain = false;
  /** Request bytes received and not yet given back to the connection window. */
  received = 0;
  sendWindow: number;
  recvWindow: number;

  constructor(
    readonly id: number,
    private readonly connection: Http2Connection,
    sendWindow: number,
    recvWindow: number,
  ) {
    this.sendWindow = sendWindow;
    this.recvWindow = recvWindow;
  }

  get closed(): boolean {
    return this._closed;
  }

  /** Answer bytes waiting to be sent. */
  get writableLength(): number {
    return this.queued;
  }

  get writableNeedDrain(): boolean {
    return this.needDrain;
  }

  /** Sends the answer's HEADERS; with endStream, that is the whole answer. */
  respond(fields: HeaderBlock, endStream = false): void {
    if (this._closed || this.headersSent) return;
    this.headersSent = true;
    const c = this.connection;
    c.send(headersFrames(this.id, encodeBlock(fields), endStream, c.peerMaxFrameSize));
    if (endStream) this.endLocal();
  }

  /** Queues answer bytes; false when the caller should wait for onDrain. */
  write(data: Buffer): boolean {
    if (this._closed || this.localEnded) return false;
    if (data.length > 0) {
      this.queue.push(data);
      this.queued += data.length;
      this.connection.flushStream(this);
    }
    if (this.queued > STREAM_HIGH_WATER) this.needDrain = true;
    return !this.needDrain;
  }

  /** Ends the answer: `data` (if any), then `trailers` as the last HEADERS (or an empty DATA with END_STREAM). */
  end(data: Buffer | undefined, trailers: HeaderBlock | undefined): void {
    if (this._closed || this.localEnded) return;
    this.localEnded = true;
    if (data && data.length > 0) {
      this.queue.push(data);
      this.queued += data.length;
    }
    this.trailers = trailers ? headersFrames(this.id, encodeBlock(trailers), true, this.connection.peerMaxFrameSize) : undefined;
    this.connection.flushStream(this);
  }

  /** Resets the stream (RST_STREAM with `code`), dropping what was not sent. */
  reset(code: number): void {
    if (this._closed) return;
    this.connection.send(rstStreamFrame(this.id, code));
    this.close();
  }

  /** Sends what flow control and the socket allow; returns whether anything is left waiting. */
  flush(connectionWindow: number, socketRoom: number, maxFrame: number): { sent: number; blocked: boolean } {
    const c = this.connection;
    let sent = 0;
    while (this.queued > 0) {
      const room = Math.min(this.sendWindow, connectionWindow - sent, socketRoom - sent, maxFrame);
      if (room <= 0) return { sent, blocked: true };
      const head = this.queue[0]!;
      const piece = head.length <= room ? head : head.subarray(0, room);
      if (piece === head) this.queue.shift();
      else this.queue[0] = head.subarray(room);
      this.queued -= piece.length;
      this.sendWindow -= piece.length;
      sent += piece.length;
      const last = this.localEnded && this.queued === 0 && !this.trailers;
      c.send(dataFrameHeader(this.id, piece.length, last), piece);
    }
    if (this.localEnded && !this._closed) {
      // The last DATA carried END_STREAM unless there are trailers or none was sent in this pass.
      if (this.trailers) c.send(this.trailers);
      else if (sent === 0) c.send(dataFrameHeader(this.id, 0, true), NO_PAYLOAD);
      this.trailers = undefined;
      this.endLocal();
    }
    return { sent, blocked: false };
  }

  /** Tells a writer that waited (write returned false) that everything has been sent. */
  drained(): void {
    if (!this.needDrain || this.queued > 0 || this._closed) return;
    this.needDrain = false;
    this.onDrain?.();
  }

  /** Our side is done: the stream closes, resetting it with NO_ERROR if the client is still sending (RFC 9113 §8.1). */
  private endLocal(): void {
    this.localEnded = true;
    if (!this.remoteEnded) this.connection.send(rstStreamFrame(this.id, H2_ERROR.NO_ERROR));
    this.close();
  }

  /** The request ended (END_STREAM from the client). */
  endRemote(): void {
    this.remoteEnded = true;
    // The request is complete and taken by the caller: its bytes no longer count against the connection.
    this.connection.giveBack(this.received);
    this.received = 0;
    this.onEnd?.();
  }

  /**
   * The caller's work for this stream has begun: until workDone, the stream counts against
   * SETTINGS_MAX_CONCURRENT_STREAMS even once closed, so a client that resets its streams as soon as
   * they are answered-to ("rapid reset") cannot have more work running than the streams it may open.
   */
  workStarted(): void {
    this.working = true;
  }

  /** The caller's work for this stream has ended (once; later calls do nothing). */
  workDone(): void {
    if (!this.working) return;
    this.working = false;
    if (this._closed) this.connection.abandonedWorkDone();
  }

  /** Done: forgets what was queued, tells the connection and the caller (once). */
  close(): void {
    if (this._closed) return;
    this._closed = true;
    this.queue.length = 0;
    this.queued = 0;
    this.connection.streamClosed(this, this.working);
    this.onClose?.();
  }
}

/** Where the peer is in sending a header block. */
interface HeaderBlockInProgress {
  streamId: number;
  endStream: boolean;
  parts: Buffer[];
  bytes: number;
}

/** One client connection. Emits 'close' once when its socket is gone. */
export class Http2Connection extends EventEmitter {
  private readonly streams = new Map<number, ServerStream>();
  private readonly decoder = new HpackDecoder();
  private readonly reader = new FrameReader(DEFAULT_MAX_FRAME_SIZE);
  private prefaceSeen = 0;
  private settingsSeen = false;
  private lastPeerStreamId = 0;
  private headerBlock: HeaderBlockInProgress | undefined;
  /** Streams with answer bytes waiting for flow control or the socket. */
  private readonly blocked = new Set<ServerStream>();
  private corked = false;
  /** Set once the socket is ended: it is destroyed when flushed or after ENDING_GRACE_MS. */
  private endingTimer: NodeJS.Timeout | undefined;
  /** A connection error was sent: nothing more the peer sends is read. */
  private broken = false;
  private goawaySent = false;
  private peerGoaway = false;
  private _destroyed = false;
  peerMaxFrameSize = DEFAULT_MAX_FRAME_SIZE;
  private peerInitialWindow = DEFAULT_WINDOW;
  private sendWindow = DEFAULT_WINDOW;
  /** Request bytes the client may still send on the connection, and those taken since the last WINDOW_UPDATE. */
  private recvWindow: number;
  private recvConsumed = 0;
  /** Open streams, and performance.now() when the last one closed (or the connection opened). */
  private quietSince = performance.now();
  private everOpened = false;
  /** Streams closed (reset, or the client left) while the caller's work for them still runs. */
  private abandonedWork = 0;

  constructor(
    private readonly socket: Socket,
    private readonly options: ConnectionOptions,
  ) {
    super();
    this.recvWindow = options.maxConnectionMemoryBytes;
    this.send(
      settingsFrame([
        [SETTING.MAX_CONCURRENT_STREAMS, options.maxConcurrentStreams],
        [SETTING.INITIAL_WINDOW_SIZE, options.maxStreamBodyBytes],
        [SETTING.MAX_HEADER_LIST_SIZE, options.maxHeaderListBytes],
        [SETTING.ENABLE_PUSH, 0],
      ]),
    );
    // The connection window starts at 65,535 (RFC 9113 §6.9.2): widened once, given back as requests are read.
    this.send(windowUpdateFrame(0, options.maxConnectionMemoryBytes - DEFAULT_WINDOW));
    socket.on('data', (chunk: Buffer) => this.received(chunk));
    socket.on('drain', () => this.flushBlocked());
    socket.on('error', () => this.destroy());
    socket.on('end', () => this.destroy());
    socket.once('close', () => this.destroy());
  }

  get destroyed(): boolean {
    return this._destroyed;
  }

  /** True once no new stream will be served (GOAWAY either way, or gone). */
  get closed(): boolean {
    return this._destroyed || this.goawaySent || this.peerGoaway;
  }

  /** performance.now() since when no stream has been open; undefined while one is. */
  idleSince(): number | undefined {
    return this.streams.size > 0 ? undefined : this.quietSince;
  }

  get hasHadStream(): boolean {
    return this.everOpened;
  }

  /** Graceful close (GOAWAY NO_ERROR): no new streams, the open ones finish, then the socket closes. */
  close(): void {
    if (this._destroyed) return;
    if (!this.goawaySent) {
      this.goawaySent = true;
      this.send(goawayFrame(this.lastPeerStreamId, H2_ERROR.NO_ERROR, ''));
    }
    this.endIfDone();
  }

  /** Closes the socket now; open streams close as reset. */
  destroy(): void {
    if (this._destroyed) return;
    this._destroyed = true;
    clearTimeout(this.endingTimer);
    for (const stream of [...this.streams.values()]) stream.close();
    this.socket.destroy();
    this.emit('close');
  }

  /** Queues frames for the socket; the frames of one turn leave together (cork until the next tick). */
  send(head: Buffer, payload?: Buffer): void {
    const socket = this.socket;
    // After our end (GOAWAY sent, nothing open) the peer may still send, e.g. a PING: no answer is due.
    if (this._destroyed || socket.writableEnded) return;
    if (socket.writableLength > SOCKET_HARD_LIMIT) {
      this.options.onError?.(new Error(`the client does not read what it is sent (${socket.writableLength} bytes waiting)`));
      this.destroy();
      return;
    }
    if (!this.corked) {
      this.corked = true;
      socket.cork();
      process.nextTick(() => {
        this.corked = false;
        socket.uncork();
      });
    }
    socket.write(head);
    if (payload && payload.length > 0) socket.write(payload);
  }

  /** Sends what `stream` has queued as far as the windows allow; remembers it if some must wait. */
  flushStream(stream: ServerStream): void {
    const room = Math.max(0, SOCKET_HIGH_WATER - this.socket.writableLength);
    const { sent, blocked } = stream.flush(this.sendWindow, room, this.peerMaxFrameSize);
    this.sendWindow -= sent;
    if (blocked) this.blocked.add(stream);
    else {
      this.blocked.delete(stream);
      stream.drained();
    }
  }

  private flushBlocked(): void {
    for (const stream of this.blocked) {
      if (this.sendWindow <= 0 || this.socket.writableLength >= SOCKET_HIGH_WATER) return;
      this.flushStream(stream);
    }
  }

  /** Called by a stream closed before its work ended, once that work has ended. */
  abandonedWorkDone(): void {
    this.abandonedWork--;
  }

  /** Called by a stream as it closes. */
  streamClosed(stream: ServerStream, stillWorking: boolean): void {
    if (stillWorking) this.abandonedWork++;
    this.streams.delete(stream.id);
    this.blocked.delete(stream);
    this.giveBack(stream.received);
    stream.received = 0;
    if (this.streams.size === 0) this.quietSince = performance.now();
    this.endIfDone();
  }

  /** Returns request bytes to the client's connection window, in batches of half the window. */
  giveBack(bytes: number): void {
    if (bytes === 0 || this._destroyed) return;
    this.recvConsumed += bytes;
    if (this.recvConsumed >= this.options.maxConnectionMemoryBytes / 2) {
      this.send(windowUpdateFrame(0, this.recvConsumed));
      this.recvWindow += this.recvConsumed;
      this.recvConsumed = 0;
    }
  }

  private endIfDone(): void {
    if ((this.goawaySent || this.peerGoaway) && this.streams.size === 0 && !this._destroyed && !this.endingTimer) {
      this.socket.end();
      // The peer may never close its side; the socket goes once what we wrote is out, or after
      // ENDING_GRACE_MS if the peer does not even read it.
      this.socket.once('finish', () => this.destroy());
      this.endingTimer = setTimeout(() => this.destroy(), ENDING_GRACE_MS).unref();
    }
  }

  private received(chunk: Buffer): void {
    if (this._destroyed || this.broken) return;
    try {
      if (this.prefaceSeen < CLIENT_PREFACE.length) {
        chunk = this.readPreface(chunk);
        if (chunk.length === 0) return;
      }
      this.reader.push(chunk, (type, flags, streamId, payload) => this.onFrame(type, flags, streamId, payload));
    } catch (err) {
      this.fail(err);
    }
  }

  private readPreface(chunk: Buffer): Buffer {
    const want = CLIENT_PREFACE.length - this.prefaceSeen;
    const part = chunk.subarray(0, want);
    if (!part.equals(CLIENT_PREFACE.subarray(this.prefaceSeen, this.prefaceSeen + part.length))) {
      throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'not an HTTP/2 client (bad connection preface)');
    }
    this.prefaceSeen += part.length;
    return chunk.subarray(part.length);
  }

  private fail(err: unknown): void {
    if (err instanceof StreamError) {
      this.streams.get(err.streamId)?.close();
      this.send(rstStreamFrame(err.streamId, err.code));
      return;
    }
    const code = err instanceof ConnectionError ? err.code : err instanceof HpackError ? H2_ERROR.COMPRESSION_ERROR : H2_ERROR.INTERNAL_ERROR;
    const message = (err as Error).message ?? String(err);
    this.options.onError?.(new Error(message));
    if (!this._destroyed) {
      this.broken = true;
      this.goawaySent = true;
      this.send(goawayFrame(this.lastPeerStreamId, code, message));
      for (const stream of [...this.streams.values()]) stream.close();
      this.endIfDone();
    }
  }

  private onFrame(type: number, flags: number, streamId: number, payload: Buffer): void {
    if (this.headerBlock && type !== FRAME.CONTINUATION) {
      throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'a frame inside a header block (CONTINUATION expected)');
    }
    if (!this.settingsSeen && type !== FRAME.SETTINGS) {
      throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'the connection preface must be followed by SETTINGS');
    }
    try {
      switch (type) {
        case FRAME.DATA:
          return this.onData(flags, streamId, payload);
        case FRAME.HEADERS:
          return this.onHeaders(flags, streamId, payload);
        case FRAME.CONTINUATION:
          return this.onContinuation(flags, streamId, payload);
        case FRAME.PRIORITY:
          if (streamId === 0) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'PRIORITY on stream 0');
          if (payload.length !== 5) throw new StreamError(streamId, H2_ERROR.FRAME_SIZE_ERROR, 'PRIORITY of a wrong size');
          return;
        case FRAME.RST_STREAM:
          return this.onRstStream(streamId, payload);
        case FRAME.SETTINGS:
          return this.onSettings(flags, streamId, payload);
        case FRAME.PING:
          return this.onPing(flags, streamId, payload);
        case FRAME.GOAWAY:
          if (streamId !== 0) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'GOAWAY on a stream');
          this.peerGoaway = true;
          return this.endIfDone();
        case FRAME.WINDOW_UPDATE:
          return this.onWindowUpdate(streamId, payload);
        case FRAME.PUSH_PROMISE:
          throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'PUSH_PROMISE from a client');
        default:
          return; // unknown frame types are ignored (RFC 9113 §4.1)
      }
    } catch (err) {
      if (!(err instanceof StreamError)) throw err;
      this.fail(err);
    }
  }

  /** The payload without its padding (PADDED flag), checking the pad length. */
  private unpadded(flags: number, payload: Buffer, skip: number): Buffer {
    if (!(flags & FLAG.PADDED)) return payload.subarray(skip);
    const pad = payload.length > 0 ? payload[0]! : -1;
    if (pad < 0 || 1 + skip + pad > payload.length) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'padding longer than the frame');
    return payload.subarray(1 + skip, payload.length - pad);
  }

  private onData(flags: number, streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'DATA on stream 0');
    const length = payload.length;
    this.recvWindow -= length;
    if (this.recvWindow < 0) throw new ConnectionError(H2_ERROR.FLOW_CONTROL_ERROR, 'DATA beyond the connection window');
    const data = this.unpadded(flags, payload, 0);
    const stream = this.streams.get(streamId);
    if (!stream) {
      if (streamId > this.lastPeerStreamId) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, `DATA on stream ${streamId}, never opened`);
      // A stream already closed here (answered or reset): what was in flight is dropped, the window given back.
      this.giveBack(length);
      return;
    }
    if (stream.remoteEnded) {
      this.giveBack(length);
      throw new StreamError(streamId, H2_ERROR.STREAM_CLOSED, 'DATA after the end of the request');
    }
    stream.recvWindow -= length;
    stream.received += length;
    if (stream.recvWindow < 0) throw new StreamError(streamId, H2_ERROR.FLOW_CONTROL_ERROR, 'DATA beyond the stream window');
    if (data.length > 0) stream.onData?.(data);
    if (flags & FLAG.END_STREAM && !stream.closed) stream.endRemote();
  }

  private onHeaders(flags: number, streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'HEADERS on stream 0');
    const fragment = this.unpadded(flags, payload, flags & FLAG.PRIORITY ? 5 : 0);
    this.headerBlock = { streamId, endStream: (flags & FLAG.END_STREAM) !== 0, parts: [fragment], bytes: fragment.length };
    if (flags & FLAG.END_HEADERS) this.headerBlockDone();
  }

  private onContinuation(flags: number, streamId: number, payload: Buffer): void {
    const block = this.headerBlock;
    if (!block || block.streamId !== streamId) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'CONTINUATION without a header block to continue');
    block.parts.push(payload);
    block.bytes += payload.length;
    if (block.bytes > MAX_HEADER_BLOCK_BYTES) {
      throw new ConnectionError(H2_ERROR.ENHANCE_YOUR_CALM, `a header block of more than ${MAX_HEADER_BLOCK_BYTES} bytes`);
    }
    if (flags & FLAG.END_HEADERS) this.headerBlockDone();
  }

  private headerBlockDone(): void {
    const { streamId, endStream, parts, bytes } = this.headerBlock!;
    this.headerBlock = undefined;
    // Decoded whatever becomes of the stream: the decoder's table must follow every block the client sent.
    const { fields, tooLarge } = this.decoder.decode(parts.length === 1 ? parts[0]! : Buffer.concat(parts, bytes), this.options.maxHeaderListBytes);
    const open = this.streams.get(streamId);
    if (open) {
      // Trailers of a request: allowed only as its end; gRPC requests have none worth reading.
      if (!endStream || open.remoteEnded) throw new StreamError(streamId, H2_ERROR.PROTOCOL_ERROR, 'HEADERS in the middle of a request');
      open.endRemote();
      return;
    }
    if (streamId % 2 === 0 || streamId <= this.lastPeerStreamId) {
      throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, `HEADERS opening stream ${streamId} (client streams are odd and increasing)`);
    }
    this.lastPeerStreamId = streamId;
    if (this.goawaySent || this._destroyed) return; // after our GOAWAY, new streams are ignored (RFC 9113 §6.8)
    const busy = this.streams.size + this.abandonedWork;
    if (busy >= this.options.maxConcurrentStreams || this.pendingAnswerBytes() > this.options.maxConnectionMemoryBytes) {
      this.send(rstStreamFrame(streamId, H2_ERROR.REFUSED_STREAM));
      return;
    }
    const headers = requestHeaders(fields, streamId);
    const stream = new ServerStream(streamId, this, this.peerInitialWindow, this.options.maxStreamBodyBytes);
    stream.headersTooLarge = tooLarge;
    this.streams.set(streamId, stream);
    this.everOpened = true;
    this.options.onStream(stream, headers);
    if (endStream && !stream.closed) stream.endRemote();
  }

  private pendingAnswerBytes(): number {
    let bytes = 0;
    for (const stream of this.blocked) bytes += stream.writableLength;
    return bytes;
  }

  private onRstStream(streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'RST_STREAM on stream 0');
    if (payload.length !== 4) throw new ConnectionError(H2_ERROR.FRAME_SIZE_ERROR, 'RST_STREAM of a wrong size');
    if (streamId > this.lastPeerStreamId) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, `RST_STREAM on stream ${streamId}, never opened`);
    this.streams.get(streamId)?.close();
  }

  private onSettings(flags: number, streamId: number, payload: Buffer): void {
    if (streamId !== 0) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'SETTINGS on a stream');
    if (flags & FLAG.ACK) {
      if (payload.length !== 0) throw new ConnectionError(H2_ERROR.FRAME_SIZE_ERROR, 'a SETTINGS acknowledgement with a payload');
      return;
    }
    if (payload.length % 6 !== 0) throw new ConnectionError(H2_ERROR.FRAME_SIZE_ERROR, 'SETTINGS of a wrong size');
    for (let at = 0; at < payload.length; at += 6) this.applySetting(payload.readUInt16BE(at), payload.readUInt32BE(at + 2));
    this.settingsSeen = true;
    this.send(frame(FRAME.SETTINGS, FLAG.ACK, 0));
  }

  private applySetting(id: number, value: number): void {
    switch (id) {
      case SETTING.ENABLE_PUSH:
        if (value > 1) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'SETTINGS_ENABLE_PUSH neither 0 nor 1');
        return;
      case SETTING.INITIAL_WINDOW_SIZE: {
        if (value > MAX_WINDOW) throw new ConnectionError(H2_ERROR.FLOW_CONTROL_ERROR, 'SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1');
        const delta = value - this.peerInitialWindow;
        this.peerInitialWindow = value;
        for (const stream of this.streams.values()) {
          stream.sendWindow += delta;
          if (stream.sendWindow > MAX_WINDOW) throw new ConnectionError(H2_ERROR.FLOW_CONTROL_ERROR, 'a stream window above 2^31-1');
        }
        if (delta > 0) this.flushBlocked();
        return;
      }
      case SETTING.MAX_FRAME_SIZE:
        if (value < DEFAULT_MAX_FRAME_SIZE || value > MAX_ALLOWED_FRAME_SIZE) {
          throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, `SETTINGS_MAX_FRAME_SIZE ${value} outside 16384–16777215`);
        }
        this.peerMaxFrameSize = value;
        return;
      default:
        // HEADER_TABLE_SIZE: our encoder never uses the peer's table. MAX_CONCURRENT_STREAMS: we open none.
        // MAX_HEADER_LIST_SIZE: advisory. Unknown settings are ignored (RFC 9113 §6.5.2).
        return;
    }
  }

  private onPing(flags: number, streamId: number, payload: Buffer): void {
    if (streamId !== 0) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'PING on a stream');
    if (payload.length !== 8) throw new ConnectionError(H2_ERROR.FRAME_SIZE_ERROR, 'PING of a wrong size');
    if (!(flags & FLAG.ACK)) this.send(frame(FRAME.PING, FLAG.ACK, 0, payload));
  }

  private onWindowUpdate(streamId: number, payload: Buffer): void {
    if (payload.length !== 4) throw new ConnectionError(H2_ERROR.FRAME_SIZE_ERROR, 'WINDOW_UPDATE of a wrong size');
    const increment = payload.readUInt32BE(0) & 0x7fffffff;
    if (streamId === 0) {
      if (increment === 0) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
      this.sendWindow += increment;
      if (this.sendWindow > MAX_WINDOW) throw new ConnectionError(H2_ERROR.FLOW_CONTROL_ERROR, 'the connection window above 2^31-1');
      this.flushBlocked();
      return;
    }
    const stream = this.streams.get(streamId);
    if (!stream) {
      if (streamId > this.lastPeerStreamId) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, `WINDOW_UPDATE on stream ${streamId}, never opened`);
      return;
    }
    if (increment === 0) throw new StreamError(streamId, H2_ERROR.PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
    stream.sendWindow += increment;
    if (stream.sendWindow > MAX_WINDOW) throw new StreamError(streamId, H2_ERROR.FLOW_CONTROL_ERROR, 'a stream window above 2^31-1');
    if (this.blocked.has(stream)) this.flushStream(stream);
  }
}

const PSEUDO_REQUEST_FIELDS = new Set([':method', ':scheme', ':path', ':authority']);

/** The request's fields by name, checked as RFC 9113 §8.2–8.3 asks (a malformed request resets its stream). */
function requestHeaders(fields: ReadonlyArray<readonly [string, string]>, streamId: number): RequestHeaders {
  const headers: RequestHeaders = {};
  let regularSeen = false;
  for (const [name, value] of fields) {
    if (name !== name.toLowerCase()) throw new StreamError(streamId, H2_ERROR.PROTOCOL_ERROR, `an upper-case header name "${name.slice(0, 64)}"`);
    if (name.startsWith(':')) {
      if (regularSeen || !PSEUDO_REQUEST_FIELDS.has(name) || name in headers) {
        throw new StreamError(streamId, H2_ERROR.PROTOCOL_ERROR, `a misplaced, unknown or repeated pseudo-header "${name.slice(0, 64)}"`);
      }
    } else {
      regularSeen = true;
    }
    const had = headers[name];
    if (had === undefined) headers[name] = value;
    else if (Array.isArray(had)) had.push(value);
    else headers[name] = [had, value];
  }
  return headers;
}

export { H2_ERROR };
