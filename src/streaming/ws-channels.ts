/**
 * The Kubernetes channel protocols over WebSocket (apimachinery wsstream): every message is one
 * channel byte plus payload (`channel.k8s.io`), or, in the `base64.` variants, a text message of
 * '0'+channel followed by base64. v5 adds CLOSE: `[255, ch]` half-closes channel ch (client-go sends
 * `[255, 0]` when stdin ends). Used for exec/attach (channels 0 stdin, 1 stdout, 2 stderr, 3 error,
 * 4 resize) and for v4 port-forward (2i data, 2i+1 error per requested port, each opened by the port
 * as u16 little-endian).
 */
import { Duplex } from 'node:stream';
import type { WebSocket, RawData } from 'ws';

const CLOSE_SIGNAL = 255;

export interface ChannelSpec {
  /** The client may send on it (otherwise its messages are dropped). */
  read: boolean;
  /** We may send on it (otherwise writes are dropped). */
  write: boolean;
}

export interface ChannelConnectionOptions {
  base64: boolean;
  /** Honour v5 CLOSE signals. */
  closeSignals: boolean;
  channels: ChannelSpec[];
  idleTimeoutMs: number;
  onProblem?(message: string): void;
}

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

/** A WebSocket carrying numbered channels; each channel is a Duplex. */
export class ChannelConnection {
  readonly channels: ChannelStream[];
  private readonly abort = new AbortController();
  private readonly idleTimer: NodeJS.Timeout | undefined;
  private readonly blocked = new Set<number>();
  private dead = false;

  constructor(
    private readonly ws: WebSocket,
    private readonly options: ChannelConnectionOptions,
  ) {
    this.channels = options.channels.map((spec, i) => new ChannelStream(this, i, spec));
    if (options.idleTimeoutMs > 0) {
      this.idleTimer = setTimeout(() => {
        options.onProblem?.('idle timeout');
        ws.terminate();
      }, options.idleTimeoutMs);
      this.idleTimer.unref();
    }
    ws.on('message', (data, isBinary) => this.onMessage(toBuffer(data), isBinary));
    ws.on('ping', () => this.touch());
    ws.on('pong', () => this.touch());
    ws.on('error', () => ws.terminate());
    ws.on('close', () => this.teardown());
  }

  get signal(): AbortSignal {
    return this.abort.signal;
  }

  get isClosed(): boolean {
    return this.dead;
  }

  private touch(): void {
    this.idleTimer?.refresh();
  }

  private onMessage(data: Buffer, isBinary: boolean): void {
    this.touch();
    if (data.length === 0) return;
    let channel: number;
    let payload: Buffer;
    if (this.options.base64) {
      if (isBinary) return;
      const text = data.toString('latin1');
      channel = text.charCodeAt(0) - 48;
      payload = Buffer.from(text.slice(1), 'base64');
    } else {
      channel = data[0]!;
      payload = data.subarray(1);
    }
    if (this.options.closeSignals && channel === CLOSE_SIGNAL && !this.options.base64) {
      if (payload.length > 0) this.channels[payload[0]!]?.remoteClose();
      return;
    }
    const stream = this.channels[channel];
    if (!stream || !stream.spec.read || payload.length === 0) return;
    if (!stream.deliver(payload)) {
      this.blocked.add(channel);
      this.ws.pause();
    }
  }

  /** A channel's reader wants more. */
  unblock(channel: number): void {
    if (this.blocked.delete(channel) && this.blocked.size === 0 && !this.dead) this.ws.resume();
  }

  /** Sends payload on channel; resolves once the socket took it (or the connection is gone). */
  send(channel: number, payload: Buffer): Promise<void> {
    if (this.dead || this.ws.readyState !== this.ws.OPEN) return Promise.resolve();
    this.touch();
    const message = this.options.base64
      ? String.fromCharCode(48 + channel) + payload.toString('base64')
      : Buffer.concat([Buffer.from([channel]), payload]);
    return new Promise((resolve) => this.ws.send(message, { binary: !this.options.base64 }, () => resolve()));
  }

  /** Normal closure (1000) after everything sent; resolves when the socket is closed. */
  close(graceMs = 5000): Promise<void> {
    if (this.dead) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => this.ws.terminate(), graceMs);
      timer.unref();
      this.ws.once('close', () => {
        clearTimeout(timer);
        resolve();
      });
      this.ws.close(1000);
    });
  }

  destroy(): void {
    this.ws.terminate();
    this.teardown();
  }

  private teardown(): void {
    if (this.dead) return;
    this.dead = true;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    for (const c of this.channels) c.connectionGone();
    this.abort.abort(new Error('streaming connection closed'));
  }
}

/** One channel. Like SPDY streams, it never emits 'error'; writes after a disconnect are dropped. */
export class ChannelStream extends Duplex {
  private remoteDone = false;

  constructor(
    private readonly conn: ChannelConnection,
    readonly index: number,
    readonly spec: ChannelSpec,
  ) {
    super({ allowHalfOpen: true });
    this.on('error', () => {});
  }

  deliver(data: Buffer): boolean {
    if (this.remoteDone) return true;
    return this.push(data);
  }

  remoteClose(): void {
    if (this.remoteDone) return;
    this.remoteDone = true;
    this.push(null);
  }

  connectionGone(): void {
    this.remoteClose();
    this.destroy();
  }

  override _read(): void {
    this.conn.unblock(this.index);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    if (!this.spec.write) return callback();
    this.conn.send(this.index, chunk).then(() => callback(), callback);
  }

  override _final(callback: (error?: Error | null) => void): void {
    // The channel protocols have no per-channel end from the server; the connection's close is the end.
    callback();
  }
}
