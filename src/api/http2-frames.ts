/**
 * HTTP/2 frames (RFC 9113 §4, §6): the 9-byte frame header, a reader that cuts a byte stream into
 * frames no larger than the size we allow, and the frames a gRPC server sends. Nothing here keeps
 * connection state; http2-connection.ts does.
 */

export const FRAME = {
  DATA: 0x0,
  HEADERS: 0x1,
  PRIORITY: 0x2,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PUSH_PROMISE: 0x5,
  PING: 0x6,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
  CONTINUATION: 0x9,
} as const;

export const FLAG = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4, PADDED: 0x8, PRIORITY: 0x20 } as const;

/** Error codes (RFC 9113 §7). */
export const H2_ERROR = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  ENHANCE_YOUR_CALM: 0xb,
} as const;

export const SETTING = {
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
} as const;

export const CLIENT_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
export const FRAME_HEADER_BYTES = 9;
/** SETTINGS_MAX_FRAME_SIZE's initial value, and the smallest a peer may set. */
export const DEFAULT_MAX_FRAME_SIZE = 16_384;
export const MAX_ALLOWED_FRAME_SIZE = 2 ** 24 - 1;
/** The largest flow-control window (2^31-1). */
export const MAX_WINDOW = 2 ** 31 - 1;
export const DEFAULT_WINDOW = 65_535;

/** A violation of the protocol by the peer: the connection ends with GOAWAY and this code. */
export class ConnectionError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/** A violation confined to one stream: it is reset with this code, the connection goes on. */
export class StreamError extends Error {
  constructor(
    readonly streamId: number,
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

export type FrameHandler = (type: number, flags: number, streamId: number, payload: Buffer) => void;

/**
 * Cuts incoming bytes into frames. What it keeps between calls is at most one frame (maxFrameSize + 9
 * bytes), so a peer trickling bytes costs linear time; a frame announced larger than maxFrameSize ends
 * the connection before its payload is read.
 */
export class FrameReader {
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  constructor(private readonly maxFrameSize: number) {}

  push(chunk: Buffer, onFrame: FrameHandler): void {
    let data = chunk;
    if (this.pendingBytes > 0) {
      this.pending.push(chunk);
      this.pendingBytes += chunk.length;
      if (!this.hasWholeFrame()) return;
      data = Buffer.concat(this.pending, this.pendingBytes);
      this.pending = [];
      this.pendingBytes = 0;
    }
    let at = 0;
    while (data.length - at >= FRAME_HEADER_BYTES) {
      const length = data.readUIntBE(at, 3);
      if (length > this.maxFrameSize) {
        throw new ConnectionError(H2_ERROR.FRAME_SIZE_ERROR, `a frame of ${length} bytes, more than the ${this.maxFrameSize} allowed`);
      }
      const end = at + FRAME_HEADER_BYTES + length;
      if (end > data.length) break;
      const type = data[at + 3]!;
      const flags = data[at + 4]!;
      const streamId = data.readUInt32BE(at + 5) & 0x7fffffff;
      onFrame(type, flags, streamId, data.subarray(at + FRAME_HEADER_BYTES, end));
      at = end;
    }
    if (at < data.length) {
      const rest = data.subarray(at);
      this.pending = [rest];
      this.pendingBytes = rest.length;
      if (rest.length >= FRAME_HEADER_BYTES) this.checkAnnouncedLength(rest);
    }
  }

  /** Whether the pending bytes hold a complete frame (checking its announced size on the way). */
  private hasWholeFrame(): boolean {
    if (this.pendingBytes < FRAME_HEADER_BYTES) return false;
    const head = this.pending[0]!.length >= FRAME_HEADER_BYTES ? this.pending[0]! : Buffer.concat(this.pending, this.pendingBytes);
    return this.pendingBytes >= FRAME_HEADER_BYTES + this.checkAnnouncedLength(head);
  }

  private checkAnnouncedLength(head: Buffer): number {
    const length = head.readUIntBE(0, 3);
    if (length > this.maxFrameSize) {
      throw new ConnectionError(H2_ERROR.FRAME_SIZE_ERROR, `a frame of ${length} bytes, more than the ${this.maxFrameSize} allowed`);
    }
    return length;
  }
}

function writeHeader(out: Buffer, at: number, length: number, type: number, flags: number, streamId: number): void {
  out.writeUIntBE(length, at, 3);
  out[at + 3] = type;
  out[at + 4] = flags;
  out.writeUInt32BE(streamId, at + 5);
}

/** A frame with `payload` (copied). */
export function frame(type: number, flags: number, streamId: number, payload?: Buffer): Buffer {
  const length = payload?.length ?? 0;
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + length);
  writeHeader(out, 0, length, type, flags, streamId);
  payload?.copy(out, FRAME_HEADER_BYTES);
  return out;
}

export function settingsFrame(settings: ReadonlyArray<readonly [id: number, value: number]>): Buffer {
  const payload = Buffer.allocUnsafe(6 * settings.length);
  settings.forEach(([id, value], i) => {
    payload.writeUInt16BE(id, 6 * i);
    payload.writeUInt32BE(value, 6 * i + 2);
  });
  return frame(FRAME.SETTINGS, 0, 0, payload);
}

export function windowUpdateFrame(streamId: number, increment: number): Buffer {
  const out = frame(FRAME.WINDOW_UPDATE, 0, streamId, Buffer.alloc(4));
  out.writeUInt32BE(increment, FRAME_HEADER_BYTES);
  return out;
}

export function rstStreamFrame(streamId: number, code: number): Buffer {
  const out = frame(FRAME.RST_STREAM, 0, streamId, Buffer.alloc(4));
  out.writeUInt32BE(code, FRAME_HEADER_BYTES);
  return out;
}

export function goawayFrame(lastStreamId: number, code: number, debug: string): Buffer {
  const text = Buffer.from(debug.slice(0, 256), 'utf8');
  const payload = Buffer.allocUnsafe(8 + text.length);
  payload.writeUInt32BE(lastStreamId, 0);
  payload.writeUInt32BE(code, 4);
  text.copy(payload, 8);
  return frame(FRAME.GOAWAY, 0, 0, payload);
}

/** A HEADERS frame for `block`, followed by CONTINUATION frames when it is larger than `maxFrameSize`. */
export function headersFrames(streamId: number, block: Buffer, endStream: boolean, maxFrameSize: number): Buffer {
  const end = endStream ? FLAG.END_STREAM : 0;
  if (block.length <= maxFrameSize) {
    const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + block.length);
    writeHeader(out, 0, block.length, FRAME.HEADERS, FLAG.END_HEADERS | end, streamId);
    block.copy(out, FRAME_HEADER_BYTES);
    return out;
  }
  const parts: Buffer[] = [];
  for (let at = 0; at < block.length; at += maxFrameSize) {
    const piece = block.subarray(at, at + maxFrameSize);
    const last = at + maxFrameSize >= block.length ? FLAG.END_HEADERS : 0;
    parts.push(at === 0 ? frame(FRAME.HEADERS, end | last, streamId, piece) : frame(FRAME.CONTINUATION, last, streamId, piece));
  }
  return Buffer.concat(parts);
}

/** The header of a DATA frame of `length` bytes (its payload is written after it, uncopied). */
export function dataFrameHeader(streamId: number, length: number, endStream: boolean): Buffer {
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES);
  writeHeader(out, 0, length, FRAME.DATA, endStream ? FLAG.END_STREAM : 0, streamId);
  return out;
}
