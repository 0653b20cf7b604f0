/**
 * The HTTP/2 connection under the gRPC transport, driven frame by frame by a raw client over a real
 * unix socket: answers, flow control both ways, and what a hostile or broken peer gets (GOAWAY with
 * the right code, refused or reset streams) — with small limits so the edges are cheap to reach.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HpackDecoder, encodeHeaderBlock } from '../../../src/api/hpack.js';
import { Http2Connection, type ConnectionOptions, type RequestHeaders, type ServerStream } from '../../../src/api/http2-connection.js';
import { CLIENT_PREFACE, FLAG, FRAME, FrameReader, H2_ERROR, SETTING, frame, rstStreamFrame, settingsFrame, windowUpdateFrame } from '../../../src/api/http2-frames.js';
import { eventually } from '../../helpers/wait.js';

interface Frame {
  type: number;
  flags: number;
  streamId: number;
  payload: Buffer;
}

/** A client that speaks HTTP/2 by hand: sends raw frames, collects and decodes what comes back. */
class RawClient {
  readonly frames: Frame[] = [];
  readonly chunks: number[] = [];
  closed = false;
  private readonly reader = new FrameReader(1 << 24);
  private readonly decoder = new HpackDecoder();

  constructor(readonly socket: net.Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.chunks.push(chunk.length);
      this.reader.push(chunk, (type, flags, streamId, payload) => this.frames.push({ type, flags, streamId, payload: Buffer.from(payload) }));
    });
    socket.on('close', () => (this.closed = true));
    socket.on('error', () => {});
  }

  static async connect(path: string, settings: [number, number][] = []): Promise<RawClient> {
    const socket = net.connect(path);
    await new Promise((resolve) => socket.once('connect', resolve));
    const client = new RawClient(socket);
    socket.write(Buffer.concat([CLIENT_PREFACE, settingsFrame(settings)]));
    return client;
  }

  send(...frames: Buffer[]): void {
    this.socket.write(Buffer.concat(frames));
  }

  request(streamId: number, fields: [string, string][], body?: Buffer): void {
    const block = encodeHeaderBlock(fields);
    const headers = frame(FRAME.HEADERS, FLAG.END_HEADERS | (body ? 0 : FLAG.END_STREAM), streamId, block);
    this.send(headers, ...(body ? [frame(FRAME.DATA, FLAG.END_STREAM, streamId, body)] : []));
  }

  of(type: number, streamId?: number): Frame[] {
    return this.frames.filter((f) => f.type === type && (streamId === undefined || f.streamId === streamId));
  }

  headersOf(f: Frame): Record<string, string> {
    return Object.fromEntries(this.decoder.decode(f.payload, 1 << 20).fields);
  }

  async goaway(): Promise<{ code: number; debug: string }> {
    await eventually('this.of(FRAME.GOAWAY).length > 0', () => this.of(FRAME.GOAWAY).length > 0, 3000);
    const g = this.of(FRAME.GOAWAY)[0]!.payload;
    return { code: g.readUInt32BE(4), debug: g.subarray(8).toString() };
  }

  async rst(streamId: number): Promise<number> {
    await eventually('this.of(FRAME.RST_STREAM, streamId).length > 0', () => this.of(FRAME.RST_STREAM, streamId).length > 0, 3000);
    return this.of(FRAME.RST_STREAM, streamId)[0]!.payload.readUInt32BE(0);
  }
}

const POST: [string, string][] = [
  [':method', 'POST'],
  [':scheme', 'http'],
  [':path', '/echo'],
  [':authority', 'localhost'],
];

describe('api: the HTTP/2 connection under the gRPC transport', function () {
  this.timeout(10_000);
  let dir: string;
  let server: net.Server;
  const sockets = new Set<net.Socket>();
  const errors: string[] = [];
  let answer: (stream: ServerStream, headers: RequestHeaders) => void;

  const options: Omit<ConnectionOptions, 'onStream'> = {
    maxConcurrentStreams: 4,
    maxHeaderListBytes: 1024,
    maxStreamBodyBytes: 100_000,
    maxConnectionMemoryBytes: 200_000,
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stove-h2-'));
    server = net.createServer((socket) => {
      sockets.add(socket);
      new Http2Connection(socket, { ...options, onStream: (s, h) => answer(s, h), onError: (e) => errors.push(e.message) });
    });
    await new Promise<void>((resolve) => server.listen(join(dir, 'h2.sock'), resolve));
  });
  after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
    await rm(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    errors.length = 0;
    // Echoes the request body after HEADERS, with a trailer.
    answer = (stream) => {
      const parts: Buffer[] = [];
      stream.onData = (c) => parts.push(Buffer.from(c));
      stream.onEnd = () => {
        stream.respond([[':status', '200']]);
        stream.end(Buffer.concat(parts), [['x-done', 'yes']]);
      };
    };
  });
  const sock = () => join(dir, 'h2.sock');

  it('answers a request with HEADERS, DATA and trailers, in order and in one write, after its SETTINGS', async () => {
    const c = await RawClient.connect(sock());
    c.request(1, POST, Buffer.from('hello'));
    await eventually('c.of(FRAME.HEADERS, 1).length === 2', () => c.of(FRAME.HEADERS, 1).length === 2, 3000);
    const types = c.frames.map((f) => f.type);
    assert.equal(types[0], FRAME.SETTINGS, 'the server speaks first with its SETTINGS');
    const settings = c.frames[0]!.payload;
    const advertised = new Map<number, number>();
    for (let at = 0; at < settings.length; at += 6) advertised.set(settings.readUInt16BE(at), settings.readUInt32BE(at + 2));
    assert.equal(advertised.get(SETTING.MAX_CONCURRENT_STREAMS), 4);
    assert.equal(advertised.get(SETTING.INITIAL_WINDOW_SIZE), 100_000);
    const onStream = c.frames.filter((f) => f.streamId === 1);
    assert.deepEqual(
      onStream.map((f) => f.type),
      [FRAME.HEADERS, FRAME.DATA, FRAME.HEADERS],
    );
    assert.equal(c.headersOf(onStream[0]!)[':status'], '200');
    assert.equal(onStream[1]!.payload.toString(), 'hello');
    assert.equal(onStream[2]!.flags & FLAG.END_STREAM, FLAG.END_STREAM);
    assert.equal(c.headersOf(onStream[2]!)['x-done'], 'yes');
    assert.ok(c.of(FRAME.SETTINGS).some((f) => f.flags & FLAG.ACK), 'our SETTINGS acknowledged');
    c.socket.destroy();
  });

  it('serves a request whose :authority is a unix socket path (what kubelets and crictl before 1.30 send)', async () => {
    const c = await RawClient.connect(sock());
    c.request(1, [...POST.filter(([n]) => n !== ':authority'), [':authority', '/run/stove/stove.sock']], Buffer.from('old'));
    await eventually('the answer', () => c.of(FRAME.HEADERS, 1).length === 2, 3000);
    assert.equal(c.of(FRAME.DATA, 1)[0]!.payload.toString(), 'old');
    c.socket.destroy();
  });

  it('answers PING with its payload, and serves requests split across CONTINUATION frames and many small reads', async () => {
    const c = await RawClient.connect(sock());
    c.send(frame(FRAME.PING, 0, 0, Buffer.from('12345678')));
    const block = encodeHeaderBlock([...POST, ['x-long', 'v'.repeat(300)]]);
    const bytes = Buffer.concat([
      frame(FRAME.HEADERS, 0, 1, block.subarray(0, 100)),
      frame(FRAME.CONTINUATION, 0, 1, block.subarray(100, 200)),
      frame(FRAME.CONTINUATION, FLAG.END_HEADERS, 1, block.subarray(200)),
      frame(FRAME.DATA, FLAG.END_STREAM, 1, Buffer.from('split')),
    ]);
    for (let at = 0; at < bytes.length; at += 7) c.socket.write(bytes.subarray(at, at + 7));
    await eventually('c.of(FRAME.DATA, 1).length === 1', () => c.of(FRAME.DATA, 1).length === 1, 3000);
    assert.equal(c.of(FRAME.DATA, 1)[0]!.payload.toString(), 'split');
    const pong = c.of(FRAME.PING)[0]!;
    assert.equal(pong.flags & FLAG.ACK, FLAG.ACK);
    assert.equal(pong.payload.toString(), '12345678');
    c.socket.destroy();
  });

  it('sends an answer larger than the client window as the client opens it, never beyond', async () => {
    answer = (stream) => {
      stream.onEnd = () => {
        stream.respond([[':status', '200']]);
        stream.end(Buffer.alloc(50_000, 7), [['x-done', 'yes']]);
      };
    };
    const c = await RawClient.connect(sock(), [[SETTING.INITIAL_WINDOW_SIZE, 10_000]]);
    c.request(1, POST);
    const dataBytes = () => c.of(FRAME.DATA, 1).reduce((n, f) => n + f.payload.length, 0);
    await eventually('dataBytes() === 10_000', () => dataBytes() === 10_000, 3000);
    // The server answers a PING after whatever DATA it could send before reading it: once the ACK is
    // here, more DATA would have been too.
    c.send(frame(FRAME.PING, 0, 0, Buffer.from('barrier!')));
    await eventually('the PING acknowledged', () => c.of(FRAME.PING).some((f) => f.payload.toString() === 'barrier!'), 3000);
    assert.equal(dataBytes(), 10_000, 'nothing beyond the stream window');
    c.send(windowUpdateFrame(1, 20_000));
    await eventually('dataBytes() === 30_000', () => dataBytes() === 30_000, 3000);
    // The connection window (65,535) is the next limit; both opened, the rest and the trailers arrive.
    c.send(windowUpdateFrame(1, 100_000), windowUpdateFrame(0, 100_000));
    await eventually('c.of(FRAME.HEADERS, 1).length === 2', () => c.of(FRAME.HEADERS, 1).length === 2, 3000);
    assert.equal(dataBytes(), 50_000);
    c.socket.destroy();
  });

  it('refuses streams beyond SETTINGS_MAX_CONCURRENT_STREAMS and serves them again once some closed', async () => {
    const held: ServerStream[] = [];
    answer = (stream) => held.push(stream);
    const c = await RawClient.connect(sock());
    for (const id of [1, 3, 5, 7, 9]) c.request(id, POST);
    assert.equal(await c.rst(9), H2_ERROR.REFUSED_STREAM);
    assert.equal(held.length, 4);
    held[0]!.respond([[':status', '200']], true);
    c.request(11, POST);
    await eventually('held.length === 5', () => held.length === 5, 3000);
    c.socket.destroy();
  });

  it('counts a stream the client reset while its work runs against the stream limit until the work ends (rapid reset)', async () => {
    const working: ServerStream[] = [];
    answer = (stream) => {
      stream.workStarted();
      working.push(stream);
    };
    const c = await RawClient.connect(sock());
    for (const id of [1, 3, 5, 7]) c.request(id, POST);
    await eventually('4 streams at work', () => working.length === 4, 3000);
    c.send(...[1, 3, 5, 7].map((id) => rstStreamFrame(id, H2_ERROR.CANCEL)));
    await eventually('the resets taken', () => working.every((s) => s.closed), 3000);
    c.request(9, POST);
    assert.equal(await c.rst(9), H2_ERROR.REFUSED_STREAM, 'four streams are still at work');
    working[0]!.workDone();
    working[0]!.workDone(); // once only
    c.request(11, POST);
    await eventually('stream 11 served', () => working.length === 5, 3000);
    c.request(13, POST);
    assert.equal(await c.rst(13), H2_ERROR.REFUSED_STREAM, 'a second workDone freed nothing more');
    c.socket.destroy();
  });

  it('gives a request more than its window FLOW_CONTROL_ERROR on that stream, and the connection goes on', async () => {
    answer = () => {};
    const c = await RawClient.connect(sock());
    c.send(frame(FRAME.HEADERS, FLAG.END_HEADERS, 1, encodeHeaderBlock(POST)));
    // Our SETTINGS (a 100,000-byte stream window) apply once the client has read them; this one has.
    await eventually('c.of(FRAME.SETTINGS).length > 0', () => c.of(FRAME.SETTINGS).length > 0, 3000);
    for (let i = 0; i < 7; i++) c.send(frame(FRAME.DATA, 0, 1, Buffer.alloc(16_000)));
    assert.equal(await c.rst(1), H2_ERROR.FLOW_CONTROL_ERROR);
    answer = (stream) => (stream.onEnd = () => stream.respond([[':status', '204']], true));
    c.request(3, POST);
    await eventually('c.of(FRAME.HEADERS, 3).length === 1', () => c.of(FRAME.HEADERS, 3).length === 1, 3000);
    assert.equal(c.of(FRAME.GOAWAY).length, 0);
    c.socket.destroy();
  });

  it('marks a request whose header list is larger than allowed, keeping the connection usable', async () => {
    let marked: boolean | undefined;
    answer = (stream) => {
      marked = stream.headersTooLarge;
      stream.respond([[':status', '431']], true);
    };
    const c = await RawClient.connect(sock());
    c.request(1, [...POST, ['x-big', 'b'.repeat(2000)]]);
    await eventually('marked !== undefined', () => marked !== undefined, 3000);
    assert.equal(marked, true);
    marked = undefined;
    c.request(3, POST);
    await eventually('marked !== undefined', () => marked !== undefined, 3000);
    assert.equal(marked, false);
    c.socket.destroy();
  });

  const violations: [string, (c: RawClient) => void, number][] = [
    ['a frame larger than SETTINGS_MAX_FRAME_SIZE', (c) => c.send(frame(FRAME.DATA, 0, 1, Buffer.alloc(16_385))), H2_ERROR.FRAME_SIZE_ERROR],
    ['HEADERS on an even stream', (c) => c.request(2, POST), H2_ERROR.PROTOCOL_ERROR],
    ['a stream id going backwards', (c) => (c.request(5, POST), c.request(3, POST)), H2_ERROR.PROTOCOL_ERROR],
    ['DATA on a stream never opened', (c) => c.send(frame(FRAME.DATA, 0, 7, Buffer.from('x'))), H2_ERROR.PROTOCOL_ERROR],
    ['a header block in HPACK it cannot decode (index 0)', (c) => c.send(frame(FRAME.HEADERS, FLAG.END_HEADERS, 1, Buffer.from([0x80]))), H2_ERROR.COMPRESSION_ERROR],
    [
      'a frame between HEADERS and its CONTINUATION',
      (c) => c.send(frame(FRAME.HEADERS, 0, 1, encodeHeaderBlock(POST)), frame(FRAME.PING, 0, 0, Buffer.alloc(8))),
      H2_ERROR.PROTOCOL_ERROR,
    ],
    [
      'a header block that never ends (CONTINUATION flood)',
      (c) => {
        c.send(frame(FRAME.HEADERS, 0, 1, Buffer.alloc(0)));
        for (let i = 0; i < 10; i++) c.send(frame(FRAME.CONTINUATION, 0, 1, Buffer.alloc(16_000, 0x82)));
      },
      H2_ERROR.ENHANCE_YOUR_CALM,
    ],
    ['a PING of the wrong size', (c) => c.send(frame(FRAME.PING, 0, 0, Buffer.alloc(4))), H2_ERROR.FRAME_SIZE_ERROR],
    ['SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1', (c) => c.send(settingsFrame([[SETTING.INITIAL_WINDOW_SIZE, 2 ** 31]])), H2_ERROR.FLOW_CONTROL_ERROR],
    ['a connection WINDOW_UPDATE of 0', (c) => c.send(windowUpdateFrame(0, 0)), H2_ERROR.PROTOCOL_ERROR],
    ['PUSH_PROMISE from the client', (c) => c.send(frame(FRAME.PUSH_PROMISE, FLAG.END_HEADERS, 1, Buffer.alloc(4))), H2_ERROR.PROTOCOL_ERROR],
  ];
  for (const [what, act, code] of violations) {
    it(`ends the connection with GOAWAY on ${what}, and closes it`, async () => {
      const c = await RawClient.connect(sock());
      act(c);
      assert.equal((await c.goaway()).code, code);
      await eventually('c.closed', () => c.closed, 3000);
      assert.equal(errors.length, 1, 'logged once');
    });
  }

  it('closes the connection of a client that does not send the HTTP/2 preface', async () => {
    const s = net.connect(sock());
    const c = new RawClient(s);
    s.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
    await eventually('c.closed', () => c.closed, 3000);
    assert.match(errors[0] ?? '', /preface/);
  });
});
