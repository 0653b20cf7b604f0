/**
 * The gRPC layer on node:http2: calls from a grpc-js client (framing, statuses, streams, cancel,
 * deadlines), malformed requests from a raw HTTP/2 client (bad prefix, oversize, garbage), after
 * which the server still answers, and the limits the gRPC layer keeps per connection (calls counted
 * until their handlers end, request bytes buffered).
 */
import assert from 'node:assert/strict';
import { lstat, mkdtemp, rm } from 'node:fs/promises';
import http2 from 'node:http2';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Metadata, status, type ServiceError } from '@grpc/grpc-js';
import { encodeGrpcMessage, parseGrpcTimeout } from '../../../src/api/grpc-http2.js';
import { MAX_MESSAGE_BYTES, serveGrpc, type GrpcEndpoint } from '../../../src/api/server.js';
import { criServices } from '../../../src/api/services.js';
import type { RuntimeHandlers, StreamSink } from '../../../src/api/handlers.js';
import { invalidArgument } from '../../../src/common/errors.js';
import { silentLogger } from '../../../src/common/logger.js';
import { NO_TELEMETRY } from '../../../src/observability/hooks.js';
import { ContainerEventResponse, StreamContainersResponse, VersionRequest, VersionResponse } from '../../../src/gen/runtime/v1/api.js';
import { collect, criClients, type CriClients } from '../../helpers/cri-client.js';
import { FLAG, FRAME, H2_ERROR, RawHttp2Client, callFields, emptyRequest, frame, headerBlock } from '../../helpers/h2-raw.js';
import { eventually, waitFor } from '../../helpers/wait.js';

interface RawAnswer {
  headers: http2.IncomingHttpHeaders;
  trailers: http2.IncomingHttpHeaders;
  body: Buffer;
}

function prefixed(message: Buffer, flag = 0): Buffer {
  const out = Buffer.alloc(5 + message.length);
  out[0] = flag;
  out.writeUInt32BE(message.length, 1);
  message.copy(out, 5);
  return out;
}

/** The grpc-status of a raw answer: from the trailers, or from the headers of a Trailers-Only one. */
const grpcStatus = (a: RawAnswer) => Number(a.trailers['grpc-status'] ?? a.headers['grpc-status']);
const grpcMessage = (a: RawAnswer) => decodeURIComponent(String(a.trailers['grpc-message'] ?? a.headers['grpc-message'] ?? ''));

describe('api: the gRPC transport', function () {
  this.timeout(20_000);
  let dir: string;
  let sock: string;
  let endpoint: GrpcEndpoint;
  let clients: CriClients;
  let session: http2.ClientHttp2Session;
  /** Resolves once `session` has the server's SETTINGS (and so has sent its ACK). */
  let settingsSeen: Promise<void>;
  const events: { sinks: StreamSink<unknown>[]; closed: number } = { sinks: [], closed: 0 };
  /** Calls to ContainerStatus wait here until released. */
  const held: (() => void)[] = [];
  const release = () => held.splice(0).forEach((r) => r());

  const handlers: Partial<RuntimeHandlers> = {
    version: async (r) => VersionResponse.fromPartial({ version: r.version, runtimeName: 'stove-test', runtimeApiVersion: 'v1' }),
    // Not async: its throw is synchronous.
    podSandboxStatus: () => {
      throw invalidArgument('thrown at once');
    },
    // An answer that cannot be encoded (a string where a message belongs).
    listContainers: async () => ({ containers: [{ id: 'c', metadata: 'not a message' }] }) as never,
    status: async () => {
      throw invalidArgument('wrong: «ünïcode» 100% \n newline');
    },
    containerStatus: async () => {
      await new Promise<void>((resolve) => held.push(resolve));
      throw invalidArgument('released');
    },
    getContainerEvents: (_r, sink) => {
      events.sinks.push(sink);
      sink.onClose(() => events.closed++);
    },
    streamContainers: async (_r, sink) => {
      // 40 messages of 256 KiB: far more than one stream's HTTP/2 window, so the writer must wait.
      for (let i = 0; i < 40; i++) {
        const written = sink.write(StreamContainersResponse.fromPartial({ containers: [{ id: String(i), labels: { pad: 'x'.repeat(256 << 10) } }] }));
        if (!written) backpressured++;
        await sink.drained();
      }
    },
  };
  let backpressured = 0;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stove-h2-'));
    sock = join(dir, 'cri.sock');
    endpoint = await serveGrpc(sock, criServices(handlers, {}, silentLogger, NO_TELEMETRY), silentLogger);
    clients = criClients(sock);
  });
  after(async () => {
    release();
    clients.close();
    await endpoint.shutdown(500);
    await rm(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    session = http2.connect('http://localhost', { createConnection: () => net.connect(sock) });
    session.on('error', () => {});
    settingsSeen = new Promise((resolve) => session.once('remoteSettings', () => resolve()));
  });
  afterEach(() => session.destroy());

  /** One raw request: `headers` over the defaults, `body` sent as is, the whole answer collected. */
  function raw(body: Buffer | undefined, headers: http2.OutgoingHttpHeaders = {}, opts: { end?: boolean } = {}): Promise<RawAnswer> {
    return new Promise((resolve, reject) => {
      const req = session.request({
        ':method': 'POST',
        ':path': '/runtime.v1.RuntimeService/Version',
        'content-type': 'application/grpc',
        te: 'trailers',
        ...headers,
      });
      const answer: RawAnswer = { headers: {}, trailers: {}, body: Buffer.alloc(0) };
      const parts: Buffer[] = [];
      req.on('response', (h) => (answer.headers = h));
      req.on('trailers', (t) => (answer.trailers = t));
      req.on('data', (c: Buffer) => parts.push(c));
      req.on('close', () => {
        answer.body = Buffer.concat(parts);
        resolve(answer);
      });
      req.on('error', reject);
      if (body) req.write(body);
      if (opts.end !== false) req.end();
    });
  }

  /** A raw Version call with `headers`; resolves with the code of the reset that ended it (0 if none). */
  function rawReset(headers: http2.OutgoingHttpHeaders): Promise<number> {
    return new Promise((resolve) => {
      const req = session.request({ ':method': 'POST', ':path': '/runtime.v1.RuntimeService/Version', 'content-type': 'application/grpc', te: 'trailers', ...headers });
      req.on('error', () => {});
      req.resume();
      req.on('close', () => resolve(req.rstCode ?? 0));
      req.end(prefixed(Buffer.alloc(0)));
    });
  }

  async function stillServes(): Promise<void> {
    const res = await clients.runtime.version({ version: 'v1' });
    assert.equal(res.runtimeName, 'stove-test');
  }

  it('answers a unary call: headers, one message, grpc-status 0 in trailers', async () => {
    assert.equal((await clients.runtime.version({ version: 'v1' })).version, 'v1');
    const a = await raw(prefixed(Buffer.from(VersionRequest.encode({ version: 'x' }).finish())), { 'content-type': 'application/grpc+proto' });
    assert.equal(a.headers[':status'], 200);
    assert.equal(a.headers['content-type'], 'application/grpc');
    assert.equal(a.trailers['grpc-status'], '0');
    assert.equal(a.body.readUInt32BE(1), a.body.length - 5);
    assert.equal(VersionResponse.decode(a.body.subarray(5)).version, 'x');
  });

  it('sends an error before any message as Trailers-Only, its message percent-encoded', async () => {
    const err = await clients.runtime.status({ verbose: false }).then(() => null, (e: ServiceError) => e);
    assert.equal(err?.code, status.INVALID_ARGUMENT);
    assert.equal(err?.details, 'wrong: «ünïcode» 100% \n newline');
    const a = await raw(prefixed(Buffer.alloc(0)), { ':path': '/runtime.v1.RuntimeService/Status' });
    assert.equal(a.headers['grpc-status'], String(status.INVALID_ARGUMENT), 'the status is in the headers');
    assert.deepEqual(a.trailers, {});
    assert.match(String(a.headers['grpc-message']), /^wrong: %C2%AB%C3%BCn%C3%AFcode%C2%BB 100%25 %0A newline$/);
    assert.equal(encodeGrpcMessage('a%b\u00e9'), 'a%25b%C3%A9');
  });

  it('answers a handler that throws synchronously or returns what cannot be encoded with an error status', async () => {
    const thrown = await clients.runtime.podSandboxStatus({ podSandboxId: 'p', verbose: false }).then(() => null, (e: ServiceError) => e);
    assert.equal(thrown?.code, status.INVALID_ARGUMENT);
    assert.equal(thrown?.details, 'thrown at once');
    const unencodable = await clients.runtime.listContainers({ filter: undefined }).then(() => null, (e: ServiceError) => e);
    assert.equal(unencodable?.code, status.INTERNAL);
    assert.match(unencodable?.details ?? '', /failed to encode the response/);
    await stillServes();
  });

  it('answers UNIMPLEMENTED for an RPC without a handler and for an unknown method, naming it', async () => {
    const err = await clients.runtime.listPodSandbox({ filter: undefined }).then(() => null, (e: ServiceError) => e);
    assert.equal(err?.code, status.UNIMPLEMENTED);
    assert.match(err?.details ?? '', /ListPodSandbox is not implemented by stove/);
    const a = await raw(prefixed(Buffer.alloc(0)), { ':path': '/runtime.v1.RuntimeService/NoSuchCall' });
    assert.equal(grpcStatus(a), status.UNIMPLEMENTED);
    assert.match(grpcMessage(a), /\/runtime\.v1\.RuntimeService\/NoSuchCall/);
  });

  it('checks a message size from its prefix before buffering it: RESOURCE_EXHAUSTED, then serves on', async () => {
    const prefix = Buffer.alloc(5);
    prefix.writeUInt32BE(MAX_MESSAGE_BYTES + 1, 1);
    // Only the prefix is sent and the request never ends: the answer cannot wait for the body.
    const a = await raw(prefix, {}, { end: false });
    assert.equal(grpcStatus(a), status.RESOURCE_EXHAUSTED);
    assert.match(grpcMessage(a), /larger than max \(16777217 vs\. 16777216\)/);
    const big = await clients.runtime.version({ version: 'x'.repeat(MAX_MESSAGE_BYTES) }).then(() => null, (e: ServiceError) => e);
    assert.equal(big?.code, status.RESOURCE_EXHAUSTED);
    await stillServes();
  });

  it('carries a large request and its large answer (4 MiB each way, many times the windows), several at once', async () => {
    const sizes = [4 << 20, 1 << 20, 300_000];
    const answers = await Promise.all(sizes.map((n, i) => clients.runtime.version({ version: String(i).repeat(n) })));
    answers.forEach((a, i) => assert.equal(a.version, String(i).repeat(sizes[i]!)));
    await stillServes();
  });

  it('refuses compression it does not speak, and malformed or extra messages', async () => {
    const msg = Buffer.from(VersionRequest.encode({ version: 'x' }).finish());
    const gz = await raw(prefixed(msg), { 'grpc-encoding': 'gzip' });
    assert.equal(grpcStatus(gz), status.UNIMPLEMENTED);
    assert.match(grpcMessage(gz), /gzip/);
    assert.equal(grpcStatus(await raw(prefixed(msg, 1))), status.INTERNAL, 'compressed flag without an encoding');
    assert.equal(grpcStatus(await raw(prefixed(msg, 7))), status.INTERNAL, 'a flag that is neither 0 nor 1');
    assert.equal(grpcStatus(await raw(Buffer.concat([prefixed(msg), prefixed(msg)]))), status.INTERNAL, 'two messages on a unary call');
    assert.equal(grpcStatus(await raw(prefixed(msg).subarray(0, 6))), status.INTERNAL, 'a message cut short');
    assert.equal(grpcStatus(await raw(Buffer.from([0, 0]))), status.INTERNAL, 'a prefix cut short');
    assert.equal(grpcStatus(await raw(undefined)), status.INTERNAL, 'no message at all');
    assert.equal(grpcStatus(await raw(prefixed(Buffer.from([0xff, 0xff, 0xff])))), status.INTERNAL, 'bytes that are no VersionRequest');
    assert.equal((await raw(prefixed(msg), { 'content-type': 'text/plain' })).headers[':status'], 415);
    assert.equal((await raw(prefixed(msg), { 'content-type': 'application/grpcx' })).headers[':status'], 415);
    assert.equal((await raw(undefined, { ':method': 'GET' })).headers[':status'], 405);
    await stillServes();
  });

  it('survives a client that is not speaking HTTP/2 at all', async () => {
    await new Promise<void>((resolve) => {
      const s = net.connect(sock, () => s.end(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n' + '\u0000\u00ff'.repeat(100))));
      s.on('error', () => resolve());
      s.on('close', () => resolve());
      s.resume();
    });
    await stillServes();
  });

  it('turns grpc-timeout into DEADLINE_EXCEEDED, for unary calls and streams', async () => {
    assert.equal(parseGrpcTimeout('100m'), 100);
    assert.equal(parseGrpcTimeout('2S'), 2000);
    assert.equal(parseGrpcTimeout('123456789m'), undefined);
    assert.equal(parseGrpcTimeout('1x'), undefined);
    const started = Date.now();
    const a = await raw(prefixed(Buffer.alloc(0)), { ':path': '/runtime.v1.RuntimeService/ContainerStatus', 'grpc-timeout': '200m' });
    assert.equal(grpcStatus(a), status.DEADLINE_EXCEEDED);
    assert.ok(Date.now() - started >= 190, 'not before the deadline');
    const closedBefore = events.closed;
    const s = await raw(prefixed(Buffer.alloc(0)), { ':path': '/runtime.v1.RuntimeService/GetContainerEvents', 'grpc-timeout': '100m' });
    assert.equal(grpcStatus(s), status.DEADLINE_EXCEEDED);
    assert.equal(events.closed, closedBefore + 1, 'the stream handler was told');
    const bad = await raw(prefixed(Buffer.alloc(0)), { 'grpc-timeout': 'soon' });
    assert.equal(grpcStatus(bad), status.INTERNAL);
    assert.equal(grpcMessage(bad), 'malformed grpc-timeout "soon"');
    // A long malformed value is quoted in part, not echoed whole.
    const long = await raw(prefixed(Buffer.alloc(0)), { 'grpc-timeout': '9'.repeat(8000) + 'S' });
    assert.equal(grpcStatus(long), status.INTERNAL);
    const message = grpcMessage(long);
    assert.ok(message.length < 100, `grpc-message of ${message.length} characters`);
    assert.match(message, /^malformed grpc-timeout "9{32}… \(8001 characters\)"$/);
  });

  it('tells a server-stream handler when the client cancels, and streams to the client until then', async () => {
    const before = events.sinks.length;
    const closedBefore = events.closed;
    const call = clients.rawRuntime.getContainerEvents({});
    const got: ContainerEventResponse[] = [];
    call.on('data', (m: ContainerEventResponse) => got.push(m));
    call.on('error', () => {});
    await eventually('the events stream opened', () => events.sinks.length === before + 1);
    const sink = events.sinks[before]!;
    sink.write(ContainerEventResponse.fromPartial({ containerId: 'c1' }));
    await eventually('the event arrived', () => got.length === 1);
    call.cancel();
    await eventually('the handler saw the cancel', () => events.closed === closedBefore + 1);
    assert.ok(sink.closed);
    assert.equal(sink.write(ContainerEventResponse.fromPartial({ containerId: 'c2' })), false);
    await stillServes();
  });

  it('frees the place of each call among the streams when its work ends, whoever ends the call: 1100 unary calls, 900 cancelled streams, then 200 open at once', async function () {
    this.timeout(60_000);
    for (let batch = 0; batch < 11; batch++) {
      await Promise.all(Array.from({ length: 100 }, () => clients.runtime.version({ version: 'v1' })));
    }
    // 900 resets: under nghttp2's burst of 1000 for a connection ("rapid reset").
    for (let batch = 0; batch < 9; batch++) {
      const before = events.sinks.length;
      const calls = Array.from({ length: 100 }, () => {
        const call = clients.rawRuntime.getContainerEvents({});
        call.on('error', () => {});
        return call;
      });
      await eventually('100 events streams opened', () => events.sinks.length === before + 100);
      for (const call of calls) call.cancel();
      await eventually('their handlers saw the cancels', () => events.sinks.slice(before).every((sink) => sink.closed));
    }
    // 200 more at once: 1100 places, were the cancelled ones still counted.
    const before = events.sinks.length;
    const open = Array.from({ length: 200 }, () => collect(clients.rawRuntime.getContainerEvents({})));
    await eventually('200 events streams opened', () => events.sinks.length === before + 200);
    for (const sink of events.sinks.slice(before)) sink.end();
    assert.equal((await Promise.all(open)).length, 200);
    await stillServes();
  });

  it('counts a call the client reset until its handler ends: beyond 1000 working calls a new stream is refused, then served once they end', async function () {
    this.timeout(30_000);
    const heldBefore = held.length;
    const peer = await RawHttp2Client.connect(sock);
    try {
      const headers = headerBlock(callFields('ContainerStatus'));
      const open = (stream: number) => Buffer.concat([frame(FRAME.HEADERS, FLAG.END_HEADERS, stream, headers), emptyRequest(stream)]);
      const cancel = Buffer.alloc(4);
      cancel.writeUInt32BE(H2_ERROR.CANCEL);
      // 600 calls whose handlers hold, reset by the client at once; 400 more left open.
      await peer.flood(600, 100, (i) => Buffer.concat([open(2 * i + 1), frame(FRAME.RST_STREAM, 0, 2 * i + 1, cancel)]));
      await peer.flood(400, 100, (i) => open(1201 + 2 * i));
      await eventually('1000 handlers hold', () => held.length === heldBefore + 1000, 10_000);
      await peer.write(open(2001));
      const refused = await waitFor('stream 2001 refused', () => peer.find((f) => f.type === FRAME.RST_STREAM && f.stream === 2001));
      assert.equal(refused.code, H2_ERROR.REFUSED_STREAM);
      release();
      await eventually('the open calls answered', () => peer.frames.filter((f) => f.type === FRAME.HEADERS).length >= 400, 10_000);
      await peer.write(open(2003));
      await eventually('stream 2003 reached its handler', () => held.length === 1);
      release();
      await eventually('stream 2003 answered', () => peer.find((f) => f.type === FRAME.HEADERS && f.stream === 2003) !== undefined);
      assert.ok(!peer.find((f) => f.type === FRAME.GOAWAY), 'the connection goes on');
    } finally {
      peer.destroy();
      release();
    }
  });

  it('bounds the request bytes buffered on a connection: a message beyond 64 MiB in flight is RESOURCE_EXHAUSTED, and fits once others end', async () => {
    const bigPrefix = Buffer.alloc(5);
    bigPrefix.writeUInt32BE(MAX_MESSAGE_BYTES, 1);
    // Four calls that promise a whole message each and send none of it: 64 MiB reserved.
    const stalled = Array.from({ length: 4 }, () => {
      const req = session.request({ ':method': 'POST', ':path': '/runtime.v1.RuntimeService/Version', 'content-type': 'application/grpc', te: 'trailers' });
      req.on('error', () => {});
      req.write(bigPrefix);
      return req;
    });
    await new Promise((resolve) => session.ping(resolve));
    const small = Buffer.from(VersionRequest.encode({ version: 'x' }).finish());
    const refused = await raw(prefixed(small));
    assert.equal(grpcStatus(refused), status.RESOURCE_EXHAUSTED);
    assert.match(grpcMessage(refused), /the request messages in flight on this connection would exceed 64 MiB/);
    for (const req of stalled) req.close(http2.constants.NGHTTP2_CANCEL);
    await eventually('the stalled calls closed', () => stalled.every((r) => r.closed));
    const served = await raw(prefixed(small));
    assert.equal(grpcStatus(served), status.OK);
  });

  it('resets a request whose metadata is over 16 KiB or 128 fields (ENHANCE_YOUR_CALM), and serves the connection on', async () => {
    // The limits hold once the client has acknowledged the server's SETTINGS (before, nghttp2's 64 KiB
    // default does): the ACK leaves before the PING, whose answer says the server has read both.
    await settingsSeen;
    await new Promise((resolve) => session.ping(resolve));
    const big = await rawReset({ 'x-big': 'a'.repeat(17 << 10) });
    assert.equal(big, http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
    const many: http2.OutgoingHttpHeaders = {};
    for (let i = 0; i < 130; i++) many[`x-${i}`] = 'v';
    assert.equal(await rawReset(many), http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
    assert.equal(grpcStatus(await raw(prefixed(Buffer.alloc(0)))), status.OK);
  });

  it('resets a request whose :authority is a socket path (clients before Kubernetes 1.30)', async () => {
    assert.equal(await rawReset({ ':authority': '/run/stove/stove.sock' }), http2.constants.NGHTTP2_PROTOCOL_ERROR);
    assert.equal(grpcStatus(await raw(prefixed(Buffer.alloc(0)))), status.OK);
  });

  it('waits for the client when it reads slower than the stream writes (backpressure), losing nothing', async () => {
    backpressured = 0;
    const messages = await collect(clients.rawRuntime.streamContainers({ filter: undefined }, new Metadata()));
    assert.equal(messages.length, 40);
    assert.deepEqual(messages.map((m) => m.containers[0]!.id), Array.from({ length: 40 }, (_, i) => String(i)));
    assert.ok(backpressured > 0, 'the transport asked the writer to wait');
  });

  it('on shutdown, stops accepting, lets a call in flight finish, then removes the socket', async () => {
    const path = join(dir, 'other.sock');
    const own = await serveGrpc(path, criServices(handlers, {}, silentLogger, NO_TELEMETRY), silentLogger);
    const other = criClients(path);
    try {
      const heldBefore = held.length;
      const pending = other.runtime.containerStatus({ containerId: 'x', verbose: false }).then(() => null, (e: ServiceError) => e);
      await eventually('the call reached its handler', () => held.length === heldBefore + 1);
      let stopped = false;
      const stopping = own.shutdown(10_000).then(() => (stopped = true));
      await assert.rejects(
        new Promise((resolve, reject) => net.connect(path).on('connect', resolve).on('error', reject)),
        'no new connections once shutting down',
      );
      assert.equal(stopped, false, 'shutdown waits for the call in flight');
      release();
      assert.match((await pending)?.details ?? '', /released/);
      await stopping;
      await assert.rejects(lstat(path), /ENOENT/);
    } finally {
      other.close();
    }
  });
});
