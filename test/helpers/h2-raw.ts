/**
 * An HTTP/2 client that writes frames by hand, for attacks on the CRI socket: it sends what no real
 * client sends (floods, malformed requests, header blocks that never end) and records what the server
 * answers. Header blocks are HPACK literals (RFC 7541 §6.2) without Huffman coding, plus the two
 * representations an HPACK bomb needs (an entry added to the dynamic table, an index referring to it).
 */
import net from 'node:net';

export const FRAME = { DATA: 0x0, HEADERS: 0x1, RST_STREAM: 0x3, SETTINGS: 0x4, PING: 0x6, GOAWAY: 0x7, WINDOW_UPDATE: 0x8, CONTINUATION: 0x9 } as const;
export const FLAG = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4 } as const;
export const SETTING = { INITIAL_WINDOW_SIZE: 0x4, MAX_CONCURRENT_STREAMS: 0x3 } as const;
/** RFC 9113 §7 error codes. */
export const H2_ERROR = { NO_ERROR: 0x0, PROTOCOL_ERROR: 0x1, INTERNAL_ERROR: 0x2, FRAME_SIZE_ERROR: 0x6, REFUSED_STREAM: 0x7, CANCEL: 0x8, ENHANCE_YOUR_CALM: 0xb } as const;
const CLIENT_PREFACE = 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n';

export function frame(type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const out = Buffer.allocUnsafe(9 + payload.length);
  out.writeUIntBE(payload.length, 0, 3);
  out[3] = type;
  out[4] = flags;
  out.writeUInt32BE(stream, 5);
  payload.copy(out, 9);
  return out;
}

/** An HPACK integer (RFC 7541 §5.1) with a `prefixBits` prefix, `first` holding the representation's pattern. */
function hpackInt(value: number, prefixBits: number, first: number): Buffer {
  const max = (1 << prefixBits) - 1;
  if (value < max) return Buffer.from([first | value]);
  const bytes = [first | max];
  value -= max;
  while (value >= 128) {
    bytes.push((value % 128) + 128);
    value = Math.floor(value / 128);
  }
  bytes.push(value);
  return Buffer.from(bytes);
}

const hpackString = (s: string) => Buffer.concat([hpackInt(Buffer.byteLength(s), 7, 0), Buffer.from(s)]);

/** Header fields as literals without indexing, new names (RFC 7541 §6.2.2): the table is never touched. */
export function headerBlock(fields: ReadonlyArray<readonly [string, string]>): Buffer {
  return Buffer.concat(fields.flatMap(([name, value]) => [Buffer.from([0x00]), hpackString(name), hpackString(value)]));
}

/** A field added to the dynamic table (literal with incremental indexing, §6.2.1): it becomes index 62. */
export const tableInsert = (name: string, value: string) => Buffer.concat([Buffer.from([0x40]), hpackString(name), hpackString(value)]);
/** An indexed field (§6.1): one byte for index 62, the newest dynamic-table entry. */
export const NEWEST_ENTRY = Buffer.from([0x80 | 62]);

/** The fields of a gRPC call to `method` of the runtime service, with `extra` after them. */
export function callFields(method = 'Version', extra: ReadonlyArray<[string, string]> = []): [string, string][] {
  return [
    [':method', 'POST'],
    [':scheme', 'http'],
    [':path', `/runtime.v1.RuntimeService/${method}`],
    [':authority', 'localhost'],
    ['content-type', 'application/grpc'],
    ['te', 'trailers'],
    ...extra,
  ];
}

/** An empty request message (the 5-byte gRPC prefix of zero bytes) that ends the stream. */
export const emptyRequest = (stream: number) => frame(FRAME.DATA, FLAG.END_STREAM, stream, Buffer.alloc(5));

export interface SeenFrame {
  type: number;
  flags: number;
  stream: number;
  /** The error code of RST_STREAM and GOAWAY. */
  code?: number;
}

/** What a flood got through before the server cut it off. */
export interface FloodResult {
  /** Bytes the socket took before it closed (all of them when it stayed open). */
  bytesSent: number;
  bytesTotal: number;
  /** The server closed the connection before the whole flood was written. */
  cutOff: boolean;
  ms: number;
}

export class RawHttp2Client {
  /** RST_STREAM, GOAWAY and HEADERS frames the server sent (others only counted, in `counts`). */
  readonly frames: SeenFrame[] = [];
  readonly counts = new Map<number, number>();
  private buffered: Buffer = Buffer.alloc(0);
  private closedAt: number | undefined;
  readonly closed: Promise<void>;

  private constructor(private readonly socket: net.Socket) {
    socket.on('data', (chunk: Buffer) => this.take(chunk));
    socket.on('error', () => {});
    this.closed = new Promise((resolve) => socket.once('close', () => resolve()));
    socket.once('close', () => (this.closedAt = performance.now()));
  }

  /**
   * Connects, sends the preface and SETTINGS (`settings` as [id, value] pairs). With `read: false` the
   * client never reads what the server sends (it stays in the kernel's buffers, then in the server's).
   */
  static async connect(path: string, options: { settings?: [number, number][]; read?: boolean } = {}): Promise<RawHttp2Client> {
    const socket = net.connect(path);
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    const client = new RawHttp2Client(socket);
    if (options.read === false) socket.pause();
    const settings = Buffer.alloc(6 * (options.settings?.length ?? 0));
    options.settings?.forEach(([id, value], i) => {
      settings.writeUInt16BE(id, 6 * i);
      settings.writeUInt32BE(value, 6 * i + 2);
    });
    socket.write(Buffer.concat([Buffer.from(CLIENT_PREFACE), frame(FRAME.SETTINGS, 0, 0, settings)]));
    return client;
  }

  /** Reads again (a client made with `read: false`): what the server sent, and its end if it closed. */
  startReading(): void {
    this.socket.resume();
  }

  get isClosed(): boolean {
    return this.closedAt !== undefined;
  }

  /** Writes `bytes`; resolves false if the connection is gone (or goes before they are taken). */
  write(bytes: Buffer): Promise<boolean> {
    if (this.socket.destroyed) return Promise.resolve(false);
    return new Promise((resolve) => this.socket.write(bytes, (err) => resolve(!err && !this.socket.destroyed)));
  }

  /** Writes `count` copies of what `make(i)` builds, `batch` at a time, stopping once the server closes the connection. */
  async flood(count: number, batch: number, make: (i: number) => Buffer): Promise<FloodResult> {
    const started = performance.now();
    let bytesSent = 0;
    let bytesTotal = 0;
    let open = true;
    for (let i = 0; i < count; i += batch) {
      const parts: Buffer[] = [];
      for (let j = i; j < Math.min(count, i + batch); j++) parts.push(make(j));
      const chunk = Buffer.concat(parts);
      bytesTotal += chunk.length;
      if (!open) continue;
      open = await this.write(chunk);
      if (open) bytesSent += chunk.length;
    }
    return { bytesSent, bytesTotal, cutOff: !open || this.isClosed, ms: performance.now() - started };
  }

  /** The first frame seen that `match` accepts, or undefined. */
  find(match: (f: SeenFrame) => boolean): SeenFrame | undefined {
    return this.frames.find(match);
  }

  destroy(): void {
    this.socket.destroy();
  }

  private take(chunk: Buffer): void {
    this.buffered = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
    let at = 0;
    while (this.buffered.length - at >= 9) {
      const length = this.buffered.readUIntBE(at, 3);
      if (this.buffered.length - at < 9 + length) break;
      const type = this.buffered[at + 3]!;
      const flags = this.buffered[at + 4]!;
      const stream = this.buffered.readUInt32BE(at + 5) & 0x7fffffff;
      const payload = this.buffered.subarray(at + 9, at + 9 + length);
      at += 9 + length;
      this.counts.set(type, (this.counts.get(type) ?? 0) + 1);
      if (type === FRAME.RST_STREAM && length === 4) this.frames.push({ type, flags, stream, code: payload.readUInt32BE(0) });
      else if (type === FRAME.GOAWAY && length >= 8) this.frames.push({ type, flags, stream: payload.readUInt32BE(0) & 0x7fffffff, code: payload.readUInt32BE(4) });
      else if (type === FRAME.HEADERS) this.frames.push({ type, flags, stream });
    }
    this.buffered = this.buffered.subarray(at);
  }
}
