/**
 * The server side of SPDY/3.1 as the Kubernetes streaming clients speak it (moby/spdystream under
 * client-go): SYN_STREAM in, SYN_REPLY out, DATA both ways with FIN half-close, RST_STREAM, PING echo,
 * GOAWAY. Header blocks go through one persistent zlib stream per direction primed with the SPDY/3
 * dictionary, flushed with Z_SYNC_FLUSH after every block.
 *
 * Deliberately absent: flow control. spdystream never sends WINDOW_UPDATE, so a sender honouring the
 * 64 KiB initial window would stall; SETTINGS and WINDOW_UPDATE are read and ignored. Backpressure is
 * per connection instead: a stream whose reader is full pauses the transport (as spdystream does), and
 * a writer's callback waits for the transport to drain.
 *
 * The transport is any Duplex: a TCP socket after the HTTP upgrade, or a WebSocket stream for the
 * `SPDY/3.1+portforward.k8s.io` tunnel. Streams never emit 'error': a reset or a dead connection ends
 * the readable side and turns further writes into no-ops, so backends piping into them cannot crash
 * the daemon when a client goes away.
 */
import { Duplex } from 'node:stream';
import zlib from 'node:zlib';
import { SPDY3_DICTIONARY } from './spdy-dictionary.js';

export const SPDY_VERSION = 3;

export const FrameType = {
  SYN_STREAM: 1,
  SYN_REPLY: 2,
  RST_STREAM: 3,
  SETTINGS: 4,
  PING: 6,
  GOAWAY: 7,
  HEADERS: 8,
  WINDOW_UPDATE: 9,
} as const;

export const FLAG_FIN = 0x01;

/** RST_STREAM status codes (SPDY/3 §2.6.3). */
export const RstStatus = {
  PROTOCOL_ERROR: 1,
  INVALID_STREAM: 2,
  REFUSED_STREAM: 3,
  CANCEL: 5,
  INTERNAL_ERROR: 6,
  STREAM_IN_USE: 8,
  STREAM_ALREADY_CLOSED: 9,
} as const;

/** Largest DATA payload we send in one frame. */
const MAX_DATA_CHUNK = 32 * 1024;
/** Largest inflated header block we accept; real ones are a few dozen bytes. */
const MAX_HEADER_BLOCK = 16 * 1024;
/** Name/value entries in one block (client-go sends at most four). */
export const MAX_HEADER_ENTRIES = 64;
/** Values in one block, NUL-separated ones counted one by one. */
export const MAX_HEADER_VALUES = 256;
/** A frame's 24-bit length allows 16 MiB; refuse anything larger than this to bound memory. */
const MAX_FRAME_PAYLOAD = 1 << 24;
/** Control frames carry a header block or a few words: bound them well below DATA's limit. */
const MAX_CONTROL_PAYLOAD = 64 * 1024;
/** Open streams per connection when the owner sets no cap. */
export const DEFAULT_MAX_STREAMS = 256;

/** Header names are lowercase; a repeated header keeps every value. */
export type SpdyHeaders = Map<string, string[]>;

/** Encodes a SPDY/3 name/value block (uncompressed): u32 count, then u32-length-prefixed names and values. */
export function encodeHeaderBlock(headers: Record<string, string | string[]>): Buffer {
  const entries = Object.entries(headers);
  const parts: Buffer[] = [u32(entries.length)];
  for (const [name, value] of entries) {
    const n = Buffer.from(name.toLowerCase(), 'utf8');
    // Several values travel as one, separated by NUL.
    const v = Buffer.from(Array.isArray(value) ? value.join('\0') : value, 'utf8');
    parts.push(u32(n.length), n, u32(v.length), v);
  }
  return Buffer.concat(parts);
}

/**
 * Decodes an uncompressed name/value block; throws on truncation and past the caps. Linear in the
 * block: a repeated name appends to its value list instead of copying it.
 */
export function decodeHeaderBlock(block: Buffer): SpdyHeaders {
  const headers: SpdyHeaders = new Map();
  let off = 0;
  let values = 0;
  const take = (n: number): Buffer => {
    if (off + n > block.length) throw new Error('truncated header block');
    const b = block.subarray(off, off + n);
    off += n;
    return b;
  };
  const count = take(4).readUInt32BE(0);
  if (count > MAX_HEADER_ENTRIES) throw new Error(`header block has ${count} entries, more than ${MAX_HEADER_ENTRIES}`);
  for (let i = 0; i < count; i++) {
    const name = take(take(4).readUInt32BE(0)).toString('utf8').toLowerCase();
    const parts = take(take(4).readUInt32BE(0)).toString('utf8').split('\0');
    values += parts.length;
    if (values > MAX_HEADER_VALUES) throw new Error(`header block has more than ${MAX_HEADER_VALUES} values`);
    const list = headers.get(name);
    if (list) list.push(...parts);
    else headers.set(name, parts);
  }
  return headers;
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0);
  return b;
}

/** A control frame: `1 | version(15) | type(16) | flags(8) | length(24) | payload`. */
export function controlFrame(type: number, flags: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt16BE(0x8000 | SPDY_VERSION, 0);
  head.writeUInt16BE(type, 2);
  head.writeUInt32BE(((flags & 0xff) << 24) | payload.length, 4);
  return Buffer.concat([head, payload]);
}

/** A data frame: `0 | stream id(31) | flags(8) | length(24) | data`. */
export function dataFrame(streamId: number, flags: number, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(streamId & 0x7fffffff, 0);
  head.writeUInt32BE(((flags & 0xff) << 24) | data.length, 4);
  return data.length === 0 ? head : Buffer.concat([head, data]);
}

/**
 * One direction of header compression: a persistent zlib stream with the SPDY/3 dictionary. Calls are
 * serialised; each returns the bytes produced by one block plus a sync flush.
 */
export class HeaderCodec {
  private readonly z: zlib.Inflate | zlib.Deflate;
  private chain: Promise<unknown> = Promise.resolve();
  private output: Buffer[] = [];
  private outputBytes = 0;
  private failure: Error | undefined;
  private pending: ((err?: Error) => void) | undefined;

  constructor(kind: 'inflate' | 'deflate') {
    this.z =
      kind === 'inflate'
        ? zlib.createInflate({ dictionary: SPDY3_DICTIONARY })
        : zlib.createDeflate({ dictionary: SPDY3_DICTIONARY });
    this.z.on('data', (chunk: Buffer) => {
      this.output.push(chunk);
      this.outputBytes += chunk.length;
      if (this.outputBytes > MAX_HEADER_BLOCK) this.fail(new Error('header block too large'));
    });
    this.z.on('error', (err: Error) => this.fail(err));
  }

  private fail(err: Error): void {
    if (this.failure) return;
    this.failure = err;
    this.pending?.(err);
    this.z.destroy();
  }

  /** Compresses or decompresses one header block. */
  process(input: Buffer): Promise<Buffer> {
    const run = () =>
      new Promise<Buffer>((resolve, reject) => {
        if (this.failure) return reject(this.failure);
        this.output = [];
        this.outputBytes = 0;
        this.pending = (err) => {
          this.pending = undefined;
          if (err) return reject(err);
          const out = Buffer.concat(this.output);
          this.output = [];
          resolve(out);
        };
        this.z.write(input);
        this.z.flush(zlib.constants.Z_SYNC_FLUSH, () => this.pending?.(this.failure));
      });
    const result = this.chain.then(run, run);
    this.chain = result.catch(() => undefined);
    return result;
  }

  close(): void {
    this.pending?.(new Error('header codec closed'));
    this.z.destroy();
  }
}

/** Bytes received but not yet parsed, kept as a chunk list so large frames are copied once. */
class ByteQueue {
  private chunks: Buffer[] = [];
  length = 0;

  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    this.chunks.push(chunk);
    this.length += chunk.length;
  }

  /** The first n bytes (n <= length) without consuming them. */
  peek(n: number): Buffer {
    if (this.chunks[0]!.length < n) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0]!.subarray(0, n);
  }

  take(n: number): Buffer {
    const out = this.peek(n);
    const first = this.chunks[0]!;
    if (first.length === n) this.chunks.shift();
    else this.chunks[0] = first.subarray(n);
    this.length -= n;
    return out;
  }
}

interface Frame {
  control: boolean;
  /** Control frame type, or the stream id of a data frame. */
  typeOrStream: number;
  version: number;
  flags: number;
  payload: Buffer;
}

export interface SpdySessionOptions {
  /** Called for every stream the client opens; call `stream.reply()` or `stream.refuse()`. */
  onStream(stream: SpdyStream): void;
  /** Close the session after this long without a frame in either direction (0 = never). */
  idleTimeoutMs: number;
  /** Bytes that arrived with the upgrade request, before the transport was handed over. */
  head?: Buffer;
  /** Told why the session ended abnormally (protocol error, idle timeout). */
  onProblem?(message: string): void;
  /** Open streams at most; a SYN_STREAM beyond it is refused (REFUSED_STREAM). Default 256. */
  maxStreams?: number;
  /** Told when a stream was refused for the cap (to log which setting it was). */
  onStreamCapped?(limit: number): void;
}

/** A SPDY/3.1 connection, server side. */
export class SpdySession {
  private readonly streams = new Map<number, SpdyStream>();
  private readonly inflate = new HeaderCodec('inflate');
  private readonly deflate = new HeaderCodec('deflate');
  private readonly input = new ByteQueue();
  private readonly outQueue: (Buffer | Promise<Buffer | undefined>)[] = [];
  private readonly blocked = new Set<number>();
  private readonly abort = new AbortController();
  private readonly idleTimer: NodeJS.Timeout | undefined;
  private readonly closeListeners: (() => void)[] = [];
  private writing = false;
  private pumping = false;
  private inflating = false;
  private lastStreamId = 0;
  private goAwaySent = false;
  private goAwayReceived = false;
  private dead = false;
  private drainWaiters: (() => void)[] = [];

  constructor(
    private readonly transport: Duplex,
    private readonly options: SpdySessionOptions,
  ) {
    if (options.idleTimeoutMs > 0) {
      this.idleTimer = setTimeout(() => this.fail('idle timeout'), options.idleTimeoutMs);
      this.idleTimer.unref();
    }
    transport.on('data', (chunk: Buffer) => {
      this.input.push(chunk);
      void this.pump();
    });
    transport.on('drain', () => this.wakeWriters());
    transport.on('error', () => this.teardown());
    transport.on('close', () => this.teardown());
    transport.on('end', () => this.teardown());
    if (options.head && options.head.length > 0) {
      this.input.push(options.head);
      void this.pump();
    }
  }

  /** Aborted when the connection is gone (client went away, idle timeout, protocol error, close). */
  get signal(): AbortSignal {
    return this.abort.signal;
  }

  get isClosed(): boolean {
    return this.dead;
  }

  /** Runs listener once the connection is gone (immediately if it already is). */
  onClose(listener: () => void): void {
    if (this.dead) listener();
    else this.closeListeners.push(listener);
  }

  /**
   * Ends the session politely: GOAWAY after everything queued, then the transport's end. Streams
   * still open are reset. Resolves once the transport is closed (or after `graceMs`, then destroys it).
   */
  async close(graceMs = 5000): Promise<void> {
    if (this.dead) return;
    for (const stream of [...this.streams.values()]) {
      if (!stream.isFinished) stream.destroy();
    }
    this.sendGoAway();
    await this.flushed();
    if (!this.dead) this.transport.end();
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.transport.destroy();
        resolve();
      }, graceMs);
      timer.unref();
      this.onClose(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /** Tears the connection down at once. */
  destroy(): void {
    this.transport.destroy();
    this.teardown();
  }

  private fail(problem: string): void {
    if (this.dead) return;
    this.options.onProblem?.(problem);
    this.destroy();
  }

  private teardown(): void {
    if (this.dead) return;
    this.dead = true;
    // The client's FIN ends the session: a half-open socket would otherwise linger.
    this.transport.destroy();
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.inflate.close();
    this.deflate.close();
    for (const stream of [...this.streams.values()]) stream.connectionGone();
    this.streams.clear();
    this.outQueue.length = 0;
    this.wakeWriters();
    this.abort.abort(new Error('streaming connection closed'));
    for (const l of this.closeListeners.splice(0)) l();
  }

  private touch(): void {
    this.idleTimer?.refresh();
  }

  // ---- reading ----------------------------------------------------------------------------------

  private nextFrame(): Frame | undefined {
    if (this.input.length < 8) return undefined;
    const head = this.input.peek(8);
    const length = head.readUInt32BE(4) & 0xffffff;
    if (length > MAX_FRAME_PAYLOAD) throw new Error('frame too large');
    if ((head[0]! & 0x80) !== 0 && length > MAX_CONTROL_PAYLOAD) throw new Error(`control frame of ${length} bytes is too large`);
    if (this.input.length < 8 + length) return undefined;
    const bytes = this.input.take(8 + length);
    const control = (bytes[0]! & 0x80) !== 0;
    return {
      control,
      version: control ? bytes.readUInt16BE(0) & 0x7fff : 0,
      typeOrStream: control ? bytes.readUInt16BE(2) : bytes.readUInt32BE(0) & 0x7fffffff,
      flags: bytes[4]!,
      payload: bytes.subarray(8),
    };
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      for (;;) {
        if (this.dead) return;
        const frame = this.nextFrame();
        if (!frame) return;
        this.touch();
        const work = this.handleFrame(frame);
        if (work) {
          this.inflating = true;
          this.updateFlow();
          try {
            await work;
          } finally {
            this.inflating = false;
            this.updateFlow();
          }
        }
      }
    } catch (err) {
      this.fail(`SPDY protocol error: ${(err as Error).message}`);
    } finally {
      this.pumping = false;
    }
  }

  /** Handles one frame; returns a promise when the frame needs header decompression. */
  private handleFrame(frame: Frame): Promise<void> | undefined {
    if (!frame.control) {
      this.onData(frame.typeOrStream, frame.flags, frame.payload);
      return undefined;
    }
    if (frame.version !== SPDY_VERSION) throw new Error(`unsupported SPDY version ${frame.version}`);
    const p = frame.payload;
    switch (frame.typeOrStream) {
      case FrameType.SYN_STREAM: {
        if (p.length < 10) throw new Error('short SYN_STREAM');
        const id = p.readUInt32BE(0) & 0x7fffffff;
        return this.inflate.process(p.subarray(10)).then((block) => this.onSynStream(id, frame.flags, decodeHeaderBlock(block)));
      }
      case FrameType.SYN_REPLY:
      case FrameType.HEADERS:
        // Never expected from a client, but the block must pass through the inflater to keep it in step.
        if (p.length < 4) throw new Error('short header frame');
        return this.inflate.process(p.subarray(4)).then(() => undefined);
      case FrameType.RST_STREAM:
        if (p.length < 8) throw new Error('short RST_STREAM');
        this.streams.get(p.readUInt32BE(0) & 0x7fffffff)?.resetByPeer();
        return undefined;
      case FrameType.PING:
        if (p.length < 4) throw new Error('short PING');
        // Client pings have odd ids; echo them. Even ids would answer our own pings; we send none.
        if (p.readUInt32BE(0) % 2 === 1) this.enqueue(controlFrame(FrameType.PING, 0, Buffer.from(p.subarray(0, 4))));
        return undefined;
      case FrameType.GOAWAY:
        this.goAwayReceived = true;
        return undefined;
      default:
        // SETTINGS, WINDOW_UPDATE and unknown types: no flow control here (see the file header).
        return undefined;
    }
  }

  private onSynStream(id: number, flags: number, headers: SpdyHeaders): void {
    if (this.dead) return;
    if (id % 2 !== 1 || id <= this.lastStreamId) {
      this.rst(id, RstStatus.PROTOCOL_ERROR);
      return;
    }
    this.lastStreamId = id;
    if (this.goAwaySent || this.goAwayReceived) {
      this.rst(id, RstStatus.REFUSED_STREAM);
      return;
    }
    const limit = this.options.maxStreams ?? DEFAULT_MAX_STREAMS;
    if (this.streams.size >= limit) {
      this.rst(id, RstStatus.REFUSED_STREAM);
      this.options.onStreamCapped?.(limit);
      return;
    }
    const stream = new SpdyStream(this, id, headers);
    this.streams.set(id, stream);
    if (flags & FLAG_FIN) stream.remoteFin();
    this.options.onStream(stream);
  }

  private onData(id: number, flags: number, data: Buffer): void {
    const stream = this.streams.get(id);
    if (!stream) {
      // Data for a stream we reset or never saw: tell the client once it is not ours.
      if (id > this.lastStreamId) this.rst(id, RstStatus.INVALID_STREAM);
      return;
    }
    if (data.length > 0 && !stream.deliver(data)) {
      this.blocked.add(id);
      this.updateFlow();
    }
    if (flags & FLAG_FIN) stream.remoteFin();
  }

  /** A stream's reader wants more: lift the pause it caused. */
  unblock(id: number): void {
    if (this.blocked.delete(id)) this.updateFlow();
  }

  private updateFlow(): void {
    if (this.dead) return;
    if (this.blocked.size > 0 || this.inflating) this.transport.pause();
    else this.transport.resume();
  }

  // ---- writing ----------------------------------------------------------------------------------

  private enqueue(item: Buffer | Promise<Buffer | undefined>): void {
    if (this.dead) return;
    this.outQueue.push(item);
    void this.drainQueue();
  }

  private async drainQueue(): Promise<void> {
    if (this.writing) return;
    this.writing = true;
    try {
      while (this.outQueue.length > 0 && !this.dead) {
        const head = this.outQueue[0]!;
        const bytes = Buffer.isBuffer(head) ? head : await head.catch(() => undefined);
        void this.outQueue.shift();
        if (bytes && !this.dead) {
          this.touch();
          this.transport.write(bytes);
        }
      }
    } finally {
      this.writing = false;
    }
    this.wakeWriters();
  }

  private wakeWriters(): void {
    if (!this.dead && (this.outQueue.length > 0 || this.transport.writableNeedDrain)) return;
    for (const w of this.drainWaiters.splice(0)) w();
  }

  /** Resolves when everything queued has been handed to the transport and it has room again. */
  flushed(): Promise<void> {
    if (this.dead || (this.outQueue.length === 0 && !this.transport.writableNeedDrain)) return Promise.resolve();
    return new Promise((resolve) => this.drainWaiters.push(resolve));
  }

  /** Sends SYN_REPLY with an empty header block, as the Kubernetes server does. */
  sendReply(id: number): void {
    this.enqueue(
      this.deflate.process(encodeHeaderBlock({})).then((block) => controlFrame(FrameType.SYN_REPLY, 0, Buffer.concat([u32(id), block]))),
    );
  }

  sendData(id: number, data: Buffer, fin: boolean): Promise<void> {
    for (let off = 0; off < data.length; off += MAX_DATA_CHUNK) {
      const end = Math.min(off + MAX_DATA_CHUNK, data.length);
      this.enqueue(dataFrame(id, fin && end === data.length ? FLAG_FIN : 0, data.subarray(off, end)));
    }
    if (data.length === 0 && fin) this.enqueue(dataFrame(id, FLAG_FIN, data));
    return this.flushed();
  }

  rst(id: number, status: number): void {
    const payload = Buffer.alloc(8);
    payload.writeUInt32BE(id & 0x7fffffff, 0);
    payload.writeUInt32BE(status, 4);
    this.enqueue(controlFrame(FrameType.RST_STREAM, 0, payload));
  }

  sendGoAway(): void {
    if (this.goAwaySent) return;
    this.goAwaySent = true;
    const payload = Buffer.alloc(8);
    payload.writeUInt32BE(this.lastStreamId, 0);
    payload.writeUInt32BE(0, 4);
    this.enqueue(controlFrame(FrameType.GOAWAY, 0, payload));
  }

  /** Called by a stream once both directions are done or it was reset. */
  forget(id: number): void {
    this.streams.delete(id);
    this.unblock(id);
  }
}

/**
 * One SPDY stream as a Duplex. Readable: the client's DATA, ended by its FIN or a reset. Writable: our
 * DATA; `end()` sends FIN. `destroy()` before both sides finished sends RST_STREAM(CANCEL).
 */
export class SpdyStream extends Duplex {
  private replied = false;
  private localDone = false;
  private remoteDone = false;
  private reset = false;

  constructor(
    private readonly session: SpdySession,
    readonly id: number,
    readonly headers: SpdyHeaders,
  ) {
    super({ allowHalfOpen: true });
    // A write after end (a backend writing late) would otherwise become an unhandled 'error'.
    this.on('error', () => {});
  }

  /** The first value of a header, or '' (names are lowercase). */
  header(name: string): string {
    return this.headers.get(name.toLowerCase())?.[0] ?? '';
  }

  get isFinished(): boolean {
    return this.reset || (this.localDone && this.remoteDone);
  }

  /** Accepts the stream: SYN_REPLY goes out before any data written to it. */
  reply(): void {
    if (this.replied || this.reset) return;
    this.replied = true;
    this.session.sendReply(this.id);
  }

  /** Refuses the stream with RST_STREAM(REFUSED_STREAM). */
  refuse(): void {
    if (this.reset) return;
    this.reset = true;
    this.session.rst(this.id, RstStatus.REFUSED_STREAM);
    this.session.forget(this.id);
    this.destroy();
  }

  // -- called by the session --

  deliver(data: Buffer): boolean {
    if (this.remoteDone || this.reset) return true;
    return this.push(data);
  }

  remoteFin(): void {
    if (this.remoteDone) return;
    this.remoteDone = true;
    this.push(null);
    this.maybeForget();
  }

  resetByPeer(): void {
    if (this.reset) return;
    this.reset = true;
    this.remoteDone = true;
    this.localDone = true;
    this.push(null);
    this.session.forget(this.id);
    this.destroy();
  }

  connectionGone(): void {
    this.reset = true;
    if (!this.remoteDone) {
      this.remoteDone = true;
      this.push(null);
    }
    this.localDone = true;
    this.destroy();
  }

  private maybeForget(): void {
    if (this.localDone && this.remoteDone) this.session.forget(this.id);
  }

  // -- Duplex --

  override _read(): void {
    this.session.unblock(this.id);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    // After a reset or a lost connection, output is dropped rather than failed (see file header).
    if (this.reset || this.localDone || this.session.isClosed) return callback();
    if (!this.replied) this.reply();
    this.session.sendData(this.id, chunk, false).then(() => callback(), callback);
  }

  override _final(callback: (error?: Error | null) => void): void {
    if (this.reset || this.localDone || this.session.isClosed) return callback();
    if (!this.replied) this.reply();
    this.localDone = true;
    this.session.sendData(this.id, Buffer.alloc(0), true).then(() => {
      this.maybeForget();
      callback();
    }, callback);
  }

  override _destroy(_error: Error | null, callback: (error?: Error | null) => void): void {
    if (!this.reset && !(this.localDone && this.remoteDone) && !this.session.isClosed) {
      this.reset = true;
      this.session.rst(this.id, RstStatus.CANCEL);
    }
    this.reset = this.reset || !(this.localDone && this.remoteDone);
    this.session.forget(this.id);
    // Never surface errors: the owner learns about ends through 'end'/'close'.
    callback(null);
  }
}
