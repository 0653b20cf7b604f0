/**
 * A minimal SPDY/3.1 client for tests, written independently of src/streaming/spdy.ts (only the
 * dictionary, a protocol constant, is shared): HTTP upgrade, SYN_STREAM with compressed headers (one
 * zlib context across all frames, as spdystream does), DATA, FIN, RST_STREAM, PING, GOAWAY, and raw
 * byte access for malformed-input tests. Every frame received is recorded for assertions.
 */
import net from 'node:net';
import type { Duplex } from 'node:stream';
import zlib from 'node:zlib';
import { SPDY3_DICTIONARY } from '../../src/streaming/spdy-dictionary.js';

export interface ReceivedFrame {
  control: boolean;
  type: number; // control type, or -1 for data
  streamId: number;
  flags: number;
  payload: Buffer;
}

export interface UpgradeResult {
  status: number;
  headers: Record<string, string[]>;
  /** Set when the upgrade succeeded. */
  client?: SpdyClient;
  /** Response body of a refused upgrade. */
  body: string;
}

/** Sends an HTTP request with SPDY upgrade headers and returns the parsed response (and a client on 101). */
export async function spdyUpgrade(
  url: string,
  protocols: string[],
  options: { method?: string; headers?: Record<string, string> } = {},
): Promise<UpgradeResult> {
  const u = new URL(url);
  const socket = net.connect(Number(u.port), u.hostname);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  const lines = [
    `${options.method ?? 'POST'} ${u.pathname}${u.search} HTTP/1.1`,
    `Host: ${u.host}`,
    'Connection: Upgrade',
    'Upgrade: SPDY/3.1',
    'Content-Length: 0',
    ...protocols.map((p) => `X-Stream-Protocol-Version: ${p}`),
    ...Object.entries(options.headers ?? {}).map(([k, v]) => `${k}: ${v}`),
  ];
  socket.write(lines.join('\r\n') + '\r\n\r\n');
  let buf = Buffer.alloc(0);
  const headEnd = await new Promise<number>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      const i = buf.indexOf('\r\n\r\n');
      if (i >= 0) {
        socket.off('data', onData);
        socket.pause();
        resolve(i);
      }
    };
    socket.on('data', onData);
    socket.once('error', reject);
    socket.once('close', () => reject(new Error('closed before response')));
  });
  const head = buf.subarray(0, headEnd).toString('latin1').split('\r\n');
  const status = Number(head[0]!.split(' ')[1]);
  const headers: Record<string, string[]> = {};
  for (const line of head.slice(1)) {
    const c = line.indexOf(':');
    const k = line.slice(0, c).trim().toLowerCase();
    (headers[k] ??= []).push(line.slice(c + 1).trim());
  }
  const rest = buf.subarray(headEnd + 4);
  if (status !== 101) {
    const len = Number(headers['content-length']?.[0] ?? 0);
    let body = rest;
    while (body.length < len) {
      const more = await new Promise<Buffer | null>((resolve) => {
        socket.once('data', resolve);
        socket.once('end', () => resolve(null));
        socket.resume();
      });
      if (!more) break;
      body = Buffer.concat([body, more]);
    }
    socket.destroy();
    return { status, headers, body: body.toString('utf8') };
  }
  return { status, headers, body: '', client: new SpdyClient(socket, rest) };
}

class Zlib {
  private out: Buffer[] = [];
  private chain: Promise<unknown> = Promise.resolve();
  constructor(private readonly z: zlib.Inflate | zlib.Deflate) {
    z.on('data', (c: Buffer) => this.out.push(c));
  }
  run(input: Buffer): Promise<Buffer> {
    const p = this.chain.then(
      () =>
        new Promise<Buffer>((resolve) => {
          this.z.write(input);
          this.z.flush(zlib.constants.Z_SYNC_FLUSH, () => {
            const b = Buffer.concat(this.out);
            this.out = [];
            resolve(b);
          });
        }),
    );
    this.chain = p;
    return p;
  }
  close(): void {
    this.z.destroy();
  }
}

function headerBlock(headers: Record<string, string>): Buffer {
  const parts: Buffer[] = [];
  const u32 = (n: number) => {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(n);
    return b;
  };
  const entries = Object.entries(headers);
  parts.push(u32(entries.length));
  for (const [k, v] of entries) {
    parts.push(u32(Buffer.byteLength(k)), Buffer.from(k), u32(Buffer.byteLength(v)), Buffer.from(v));
  }
  return Buffer.concat(parts);
}

function control(type: number, flags: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(8);
  h.writeUInt16BE(0x8003, 0);
  h.writeUInt16BE(type, 2);
  h.writeUInt32BE((flags << 24) | payload.length, 4);
  return Buffer.concat([h, payload]);
}

function data(id: number, flags: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(8);
  h.writeUInt32BE(id, 0);
  h.writeUInt32BE((flags << 24) | payload.length, 4);
  return Buffer.concat([h, payload]);
}

/** A client stream: data received, whether it ended (FIN) or was reset. */
export class ClientStream {
  readonly chunks: Buffer[] = [];
  fin = false;
  reset: number | undefined;
  replied = false;
  private waiters: (() => void)[] = [];

  constructor(
    private readonly client: SpdyClient,
    readonly id: number,
  ) {}

  notify(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  /** Resolves when pred() holds (checked on every event of this stream). */
  until(pred: () => boolean, timeoutMs = 10_000): Promise<void> {
    return waitUntil(this.waiters, pred, timeoutMs, `stream ${this.id}: timed out`);
  }

  get received(): Buffer {
    return Buffer.concat(this.chunks);
  }

  /** Waits for FIN (or reset) and returns all data. */
  async readAll(timeoutMs?: number): Promise<Buffer> {
    await this.until(() => this.fin || this.reset !== undefined, timeoutMs);
    return this.received;
  }

  write(payload: Buffer | string, fin = false): void {
    this.client.raw(data(this.id, fin ? 1 : 0, Buffer.from(payload)));
  }

  end(): void {
    this.client.raw(data(this.id, 1, Buffer.alloc(0)));
  }

  rst(status = 5): void {
    const p = Buffer.alloc(8);
    p.writeUInt32BE(this.id, 0);
    p.writeUInt32BE(status, 4);
    this.client.raw(control(3, 0, p));
  }
}

export class SpdyClient {
  readonly frames: ReceivedFrame[] = [];
  readonly streams = new Map<number, ClientStream>();
  private nextId = 1;
  private nextPing = 1;
  private buf = Buffer.alloc(0);
  private readonly deflate = new Zlib(zlib.createDeflate({ dictionary: SPDY3_DICTIONARY }));
  private readonly inflate = new Zlib(zlib.createInflate({ dictionary: SPDY3_DICTIONARY }));
  private waiters: (() => void)[] = [];
  private parsing: Promise<void> = Promise.resolve();
  closed = false;

  constructor(
    readonly socket: Duplex,
    initial: Buffer = Buffer.alloc(0),
  ) {
    socket.on('data', (chunk: Buffer) => this.feed(chunk));
    socket.on('close', () => {
      this.closed = true;
      this.deflate.close();
      this.inflate.close();
      this.notifyAll();
    });
    socket.on('error', () => {});
    if (initial.length) this.feed(initial);
    socket.resume();
  }

  private feed(chunk: Buffer): void {
    this.parsing = this.parsing.then(() => this.parse(chunk));
  }

  private async parse(chunk: Buffer): Promise<void> {
    this.buf = Buffer.concat([this.buf, chunk]);
    while (this.buf.length >= 8) {
      const len = this.buf.readUInt32BE(4) & 0xffffff;
      if (this.buf.length < 8 + len) break;
      const frame = this.buf.subarray(0, 8 + len);
      this.buf = this.buf.subarray(8 + len);
      const isControl = (frame[0]! & 0x80) !== 0;
      const flags = frame[4]!;
      const payload = Buffer.from(frame.subarray(8));
      if (!isControl) {
        const id = frame.readUInt32BE(0) & 0x7fffffff;
        this.frames.push({ control: false, type: -1, streamId: id, flags, payload });
        const s = this.streams.get(id);
        if (s) {
          s.chunks.push(payload);
          if (flags & 1) s.fin = true;
          s.notify();
        }
      } else {
        const type = frame.readUInt16BE(2);
        const streamId = type === 1 || type === 2 || type === 3 || type === 8 ? payload.readUInt32BE(0) & 0x7fffffff : 0;
        this.frames.push({ control: true, type, streamId, flags, payload });
        if (type === 2) {
          await this.inflate.run(payload.subarray(4));
          const s = this.streams.get(streamId);
          if (s) {
            s.replied = true;
            if (flags & 1) s.fin = true;
            s.notify();
          }
        } else if (type === 3) {
          const s = this.streams.get(streamId);
          if (s) {
            s.reset = payload.readUInt32BE(4);
            s.notify();
          }
        }
      }
      this.notifyAll();
    }
  }

  private notifyAll(): void {
    for (const w of this.waiters.splice(0)) w();
    for (const s of this.streams.values()) s.notify();
  }

  /** Resolves when pred() holds, re-checked after every frame. */
  until(pred: () => boolean, timeoutMs = 10_000): Promise<void> {
    return waitUntil(this.waiters, pred, timeoutMs, 'timed out waiting for the server');
  }

  raw(bytes: Buffer): void {
    if (!this.socket.destroyed) this.socket.write(bytes);
  }

  /** The SYN_STREAM frame bytes for a new stream (compressed with this connection's context). */
  async synStreamFrame(headers: Record<string, string>, fin = false): Promise<{ id: number; frame: Buffer }> {
    const id = this.nextId;
    this.nextId += 2;
    const block = await this.deflate.run(headerBlock(headers));
    const p = Buffer.alloc(10);
    p.writeUInt32BE(id, 0);
    this.streams.set(id, new ClientStream(this, id));
    return { id, frame: control(1, fin ? 1 : 0, Buffer.concat([p, block])) };
  }

  /** Opens a stream and waits for its SYN_REPLY (or RST). */
  async open(headers: Record<string, string>, options: { fin?: boolean; wait?: boolean } = {}): Promise<ClientStream> {
    const { id, frame } = await this.synStreamFrame(headers, options.fin);
    this.raw(frame);
    const s = this.streams.get(id)!;
    if (options.wait !== false) await s.until(() => s.replied || s.reset !== undefined);
    return s;
  }

  /** Sends a PING and waits for its echo. */
  async ping(): Promise<number> {
    const id = this.nextPing;
    this.nextPing += 2;
    const p = Buffer.alloc(4);
    p.writeUInt32BE(id);
    this.raw(control(6, 0, p));
    await this.until(() => this.frames.some((f) => f.control && f.type === 6 && f.payload.readUInt32BE(0) === id));
    return id;
  }

  goAway(): void {
    this.raw(control(7, 0, Buffer.alloc(8)));
  }

  /** Frames of a control type received so far. */
  controlFrames(type: number): ReceivedFrame[] {
    return this.frames.filter((f) => f.control && f.type === type);
  }

  async waitClosed(timeoutMs = 10_000): Promise<void> {
    await this.until(() => this.closed, timeoutMs);
  }

  close(): void {
    this.socket.destroy();
  }
}

export const SPDY = { SYN_STREAM: 1, SYN_REPLY: 2, RST_STREAM: 3, SETTINGS: 4, PING: 6, GOAWAY: 7, HEADERS: 8, WINDOW_UPDATE: 9 };
export { control as controlFrameBytes, data as dataFrameBytes };

/** Resolves when pred() holds, checked now and whenever the owner calls (and drains) `waiters`. */
function waitUntil(waiters: (() => void)[], pred: () => boolean, timeoutMs: number, timeoutMessage: string): Promise<void> {
  if (pred()) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(timeoutMessage)), timeoutMs);
    const check = () => {
      if (pred()) {
        clearTimeout(timer);
        resolve();
      } else waiters.push(check);
    };
    waiters.push(check);
  });
}
