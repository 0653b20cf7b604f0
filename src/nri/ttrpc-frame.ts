/**
 * containerd/ttrpc's framing: every message is a 10-byte big-endian header (payload length u32, stream
 * id u32, message type u8, flags u8) followed by the payload. A unary call is one request frame on an
 * odd stream id chosen by the caller, answered by one response frame on the same id.
 */

import { ByteQueue } from './byte-queue.js';

export const TTRPC_HEADER_LENGTH = 10;
/** ttrpc's own limit on one message's payload (4 MiB); larger frames are refused, not buffered. */
export const TTRPC_MAX_MESSAGE = 4 << 20;

export const enum TtrpcType {
  Request = 1,
  Response = 2,
  Data = 3,
}

export interface TtrpcFrame {
  streamId: number;
  type: number;
  flags: number;
  payload: Buffer;
}

export class TtrpcProtocolError extends Error {}

/** One frame's bytes. */
export function encodeTtrpcFrame(frame: TtrpcFrame): Buffer {
  if (frame.payload.length > TTRPC_MAX_MESSAGE) {
    throw new TtrpcProtocolError(`ttrpc message of ${frame.payload.length} bytes is over the ${TTRPC_MAX_MESSAGE}-byte limit`);
  }
  const header = Buffer.alloc(TTRPC_HEADER_LENGTH);
  header.writeUInt32BE(frame.payload.length, 0);
  header.writeUInt32BE(frame.streamId >>> 0, 4);
  header.writeUInt8(frame.type, 8);
  header.writeUInt8(frame.flags, 9);
  return Buffer.concat([header, frame.payload]);
}

/**
 * Cuts a byte stream into frames. A header announcing more than the limit is a protocol error (the
 * connection is closed by the caller): nothing is allocated for it.
 */
export class TtrpcFrameReader {
  private readonly queue = new ByteQueue();

  constructor(private readonly maxMessage = TTRPC_MAX_MESSAGE) {}

  /** Adds bytes; returns every frame they complete. */
  push(data: Buffer): TtrpcFrame[] {
    this.queue.push(data);
    const frames: TtrpcFrame[] = [];
    while (this.queue.length >= TTRPC_HEADER_LENGTH) {
      const length = this.queue.peek(TTRPC_HEADER_LENGTH).readUInt32BE(0);
      if (length > this.maxMessage) {
        throw new TtrpcProtocolError(`ttrpc message of ${length} bytes is over the ${this.maxMessage}-byte limit`);
      }
      if (this.queue.length < TTRPC_HEADER_LENGTH + length) break;
      const bytes = this.queue.take(TTRPC_HEADER_LENGTH + length);
      frames.push({
        streamId: bytes.readUInt32BE(4),
        type: bytes.readUInt8(8),
        flags: bytes.readUInt8(9),
        payload: bytes.subarray(TTRPC_HEADER_LENGTH),
      });
    }
    return frames;
  }
}
