/**
 * NRI's connection multiplexer (containerd/nri pkg/net/multiplex): several logical byte streams over
 * one socket. Each chunk is an 8-byte big-endian header (connection id u32, payload length u32) and the
 * payload. NRI uses two connections: 1 carries the plugin's service (the runtime calls it), 2 the
 * runtime's service (the plugin calls it). Opening a connection sends nothing; both ends just use the id.
 */
import type { Duplex } from 'node:stream';
import { ByteQueue } from './byte-queue.js';
import { TTRPC_HEADER_LENGTH, TTRPC_MAX_MESSAGE } from './ttrpc-frame.js';
import { unavailable } from '../common/errors.js';

export const MUX_HEADER_LENGTH = 8;
/** The largest chunk either side writes or accepts: one whole ttrpc message. */
export const MUX_MAX_PAYLOAD = TTRPC_HEADER_LENGTH + TTRPC_MAX_MESSAGE;
export const PLUGIN_SERVICE_CONN = 1;
export const RUNTIME_SERVICE_CONN = 2;

/** One mux chunk's bytes. */
export function encodeMuxChunk(connId: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(MUX_HEADER_LENGTH);
  header.writeUInt32BE(connId >>> 0, 0);
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
}

export type MuxReceiver = (data: Buffer) => void;

/**
 * The runtime's (or a test plugin's) end of a multiplexed socket. Bytes for an id nobody opened are
 * dropped, as NRI does; a chunk over the limit or a broken socket closes everything.
 */
export class Mux {
  private readonly receivers = new Map<number, MuxReceiver>();
  private readonly pending = new ByteQueue();
  private closed = false;
  private readonly closeListeners: ((err?: Error) => void)[] = [];

  constructor(private readonly trunk: Duplex) {
    trunk.on('data', (data: Buffer) => this.onData(data));
    trunk.on('error', (err: Error) => this.close(err));
    trunk.on('close', () => this.close());
    trunk.on('end', () => this.close());
  }

  /** Receives the bytes of one logical connection. */
  open(connId: number, receiver: MuxReceiver): void {
    if (connId === 0) throw new Error('mux connection id 0 is reserved');
    this.receivers.set(connId, receiver);
  }

  /** Writes bytes on a logical connection, cut into chunks no larger than the limit. */
  write(connId: number, data: Buffer): void {
    if (this.closed) throw unavailable('connection closed');
    let off = 0;
    do {
      this.trunk.write(encodeMuxChunk(connId, data.subarray(off, off + MUX_MAX_PAYLOAD)));
      off += MUX_MAX_PAYLOAD;
    } while (off < data.length);
  }

  onClose(listener: (err?: Error) => void): void {
    if (this.closed) listener();
    else this.closeListeners.push(listener);
  }

  get isClosed(): boolean {
    return this.closed;
  }

  close(err?: Error): void {
    if (this.closed) return;
    this.closed = true;
    this.trunk.destroy();
    for (const l of this.closeListeners.splice(0)) l(err);
  }

  private onData(data: Buffer): void {
    this.pending.push(data);
    while (!this.closed && this.pending.length >= MUX_HEADER_LENGTH) {
      const header = this.pending.peek(MUX_HEADER_LENGTH);
      const connId = header.readUInt32BE(0);
      const length = header.readUInt32BE(4);
      if (length > MUX_MAX_PAYLOAD) {
        this.close(new Error(`mux chunk of ${length} bytes is over the ${MUX_MAX_PAYLOAD}-byte limit`));
        return;
      }
      if (this.pending.length < MUX_HEADER_LENGTH + length) return;
      const payload = this.pending.take(MUX_HEADER_LENGTH + length).subarray(MUX_HEADER_LENGTH);
      const receiver = this.receivers.get(connId);
      if (!receiver) continue;
      try {
        receiver(payload);
      } catch (err) {
        this.close(err as Error);
      }
    }
  }
}
