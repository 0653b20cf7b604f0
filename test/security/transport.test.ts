/**
 * The CRI transport against slow and hostile clients: streams whose request never arrives are ended
 * with DEADLINE_EXCEEDED after the request deadline while other clients are answered at once;
 * connections beyond the cap are refused (and logged), and beyond the number kept a new one closes
 * the connection idle longest, never one with a call open nor one yet to make its first call (300
 * clients connecting and calling at once are all answered); a connection that never calls, or has had no
 * call in flight for the idle timeout, is closed, and a gRPC client on such a connection simply
 * reconnects; a quiet connection with a call open is left alone. The limits are made small here.
 */
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import net from 'node:net';
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { join } from 'node:path';
import { status } from '@grpc/grpc-js';
import { serveGrpc, type ConnectionLimits, type GrpcEndpoint } from '../../src/api/server.js';
import { criServices } from '../../src/api/services.js';
import type { RuntimeHandlers } from '../../src/api/handlers.js';
import { createLogger } from '../../src/common/logger.js';
import { NO_TELEMETRY } from '../../src/observability/hooks.js';
import { ListContainersResponse, StreamContainersResponse, VersionResponse } from '../../src/gen/runtime/v1/api.js';
import { criClients, type CriClients } from '../helpers/cri-client.js';
import { tempDirPerTest } from '../helpers/temp-dir.js';
import { eventually } from '../helpers/wait.js';

const REQUEST_TIMEOUT_MS = 1000;

interface Stalled {
  started: number;
  ended?: number;
  headers: http2.IncomingHttpHeaders;
}

describe('security: the CRI transport and slow or hostile clients', function () {
  this.timeout(30_000);
  let endpoint: GrpcEndpoint | undefined;
  const sessions: http2.ClientHttp2Session[] = [];
  const clients: CriClients[] = [];
  const logLines: string[] = [];
  const log = createLogger('debug', (line) => logLines.push(line));
  const handlers: Partial<RuntimeHandlers> = {
    version: async () => VersionResponse.fromPartial({ version: '0.1.0', runtimeName: 'stove-test', runtimeApiVersion: 'v1' }),
    getContainerEvents: () => {},
    // Answers far larger than a client's flow-control window.
    listContainers: async () => ListContainersResponse.fromPartial({ containers: [{ id: 'big', labels: { pad: 'x'.repeat(1 << 20) } }] }),
    streamContainers: async (_r, sink) => {
      for (let i = 0; i < 8 && !sink.closed; i++) {
        sink.write(StreamContainersResponse.fromPartial({ containers: [{ id: String(i), labels: { pad: 'x'.repeat(256 << 10) } }] }));
        await sink.drained();
      }
      streamEnded = sink.closed ? 'closed' : 'ended';
    },
  };
  let streamEnded: 'closed' | 'ended' | undefined;

  async function serve(limits: Partial<ConnectionLimits>): Promise<string> {
    const sock = join(dir(), 'cri.sock');
    endpoint = await serveGrpc(sock, criServices(handlers, {}, log, NO_TELEMETRY), log, limits);
    return sock;
  }

  function connect(sock: string): http2.ClientHttp2Session {
    const session = http2.connect('http://localhost', { createConnection: () => net.connect(sock) });
    session.on('error', () => {});
    sessions.push(session);
    return session;
  }

  function client(sock: string): CriClients {
    const c = criClients(sock);
    clients.push(c);
    return c;
  }

  /** A call whose request never completes: headers only, or a prefix promising bytes that never come. */
  function stall(session: http2.ClientHttp2Session, body: Buffer | undefined): Stalled {
    const req = session.request({ ':method': 'POST', ':path': '/runtime.v1.RuntimeService/Version', 'content-type': 'application/grpc', te: 'trailers' });
    const s: Stalled = { started: performance.now(), headers: {} };
    req.on('response', (h) => (s.headers = h));
    req.on('error', () => {});
    req.on('close', () => (s.ended = performance.now()));
    if (body) req.write(body);
    return s;
  }

  /** A raw call on `session` with an empty request (5-byte prefix), its answer read and dropped. */
  function call(session: http2.ClientHttp2Session, method: string): http2.ClientHttp2Stream {
    const req = session.request({ ':method': 'POST', ':path': `/runtime.v1.RuntimeService/${method}`, 'content-type': 'application/grpc', te: 'trailers' });
    req.on('error', () => {});
    req.end(Buffer.alloc(5));
    req.resume();
    return req;
  }

  /** A Version call on `session`, answered. */
  async function answeredVersion(session: http2.ClientHttp2Session): Promise<void> {
    const req = call(session, 'Version');
    await new Promise((resolve) => req.once('close', resolve));
  }

  /** A GetContainerEvents stream on `session`, open (its response headers arrived) and kept open. */
  async function openEvents(session: http2.ClientHttp2Session): Promise<http2.ClientHttp2Stream> {
    const events = call(session, 'GetContainerEvents');
    await new Promise((resolve) => events.once('response', resolve));
    return events;
  }

  beforeEach(() => {
    logLines.length = 0;
  });
  // Registered before the temp dir's hooks, so the server stops before its dir goes.
  afterEach(async () => {
    for (const s of sessions.splice(0)) s.destroy();
    for (const c of clients.splice(0)) c.close();
    await endpoint?.shutdown(200);
    endpoint = undefined;
  });
  const dir = tempDirPerTest('stove-transport-');

  it('ends stalled requests with DEADLINE_EXCEEDED after the request deadline, answering others at once meanwhile', async () => {
    const sock = await serve({ requestTimeoutMs: REQUEST_TIMEOUT_MS });
    // Connected (and grpc-js loaded) before the clock starts.
    const { runtime } = client(sock);
    await runtime.version({ version: 'v1' });
    const promise = Buffer.alloc(5);
    promise.writeUInt32BE(1 << 20, 1);
    const stalled: Stalled[] = [];
    for (let c = 0; c < 4; c++) {
      const session = connect(sock);
      // Headers without a body, a prefix without its message, half a prefix.
      for (let i = 0; i < 50; i++) stalled.push(stall(session, [undefined, promise, promise.subarray(0, 2)][i % 3]));
    }
    // A PING is answered after the frames before it: the server holds every stalled call now.
    await Promise.all(sessions.map((s) => new Promise((resolve) => s.ping(resolve))));
    const started = performance.now();
    assert.equal((await runtime.version({ version: 'v1' })).runtimeName, 'stove-test');
    const took = performance.now() - started;
    // Answered while every stalled call still waits for its deadline: it queued behind none of them.
    assert.ok(stalled.every((s) => s.ended === undefined), `Version took ${took.toFixed(0)} ms, after stalled calls had ended`);

    await eventually('every stalled call ended', () => stalled.every((s) => s.ended !== undefined), 10_000);
    for (const s of stalled) {
      assert.equal(s.headers['grpc-status'], String(status.DEADLINE_EXCEEDED));
      assert.match(decodeURIComponent(String(s.headers['grpc-message'])), /the request message did not arrive within 1s of its headers/);
      assert.ok(s.ended! - s.started >= REQUEST_TIMEOUT_MS - 20, `ended after ${(s.ended! - s.started).toFixed(0)} ms, before the deadline`);
    }
    assert.ok(sessions.every((s) => !s.closed), 'the connections themselves stay open');
    assert.equal((await runtime.version({ version: 'v1' })).runtimeName, 'stove-test');
  });

  it('resets the call of a client that stops taking its response, unary or streamed, and serves others meanwhile', async () => {
    const sock = await serve({ responseStallMs: 300 });
    // A client that grants no flow-control window: nothing of an answer's body can reach it.
    const session = http2.connect('http://localhost', { createConnection: () => net.connect(sock), settings: { initialWindowSize: 0 } });
    session.on('error', () => {});
    sessions.push(session);
    const unread = (path: string) => {
      const req = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/grpc', te: 'trailers' });
      req.on('error', () => {});
      req.end(Buffer.alloc(5));
      const started = performance.now();
      return new Promise<{ rstCode: number; ms: number }>((resolve) => req.on('close', () => resolve({ rstCode: req.rstCode!, ms: performance.now() - started })));
    };
    streamEnded = undefined;
    const [unary, streamed] = [unread('/runtime.v1.RuntimeService/ListContainers'), unread('/runtime.v1.RuntimeService/StreamContainers')];
    const { runtime } = client(sock);
    assert.equal((await runtime.version({ version: 'v1' })).runtimeName, 'stove-test');
    for (const r of [await unary, await streamed]) {
      assert.equal(r.rstCode, http2.constants.NGHTTP2_CANCEL);
      assert.ok(r.ms >= 280, `reset after ${r.ms.toFixed(0)} ms, before the stall limit`);
    }
    await eventually('the stream handler saw its call end', () => streamEnded === 'closed');
  });

  it('refuses connections beyond the cap with a log line, and takes new ones once some closed', async () => {
    const sock = await serve({ maxConnections: 3 });
    const held = [connect(sock), connect(sock), connect(sock)];
    await Promise.all(held.map((s) => new Promise((resolve) => s.once('remoteSettings', resolve))));
    const extra = connect(sock);
    await new Promise<void>((resolve) => extra.once('close', () => resolve()));
    assert.ok(!held.some((s) => s.closed), 'the connections within the cap stay');
    await eventually('the refusal was logged', () => logLines.some((l) => l.includes('refused CRI connections: too many open') && l.includes('"maxConnections":3')));
    held[0]!.destroy();
    await eventually('a new client is served once a connection closed', async () => (await client(sock).runtime.version({ version: 'v1' })).runtimeName === 'stove-test');
  });

  it('beyond the connections kept, a new connection closes the one idle longest, never one with a call open', async () => {
    const sock = await serve({ idleConnectionsKept: 3 });
    /** A connection that made one Version call, answered. */
    async function used(): Promise<http2.ClientHttp2Session> {
      const session = connect(sock);
      await answeredVersion(session);
      return session;
    }
    // The oldest holds an events stream open: busy, however long ago it connected.
    const watching = connect(sock);
    const events = await openEvents(watching);
    const first = await used();
    const second = await used();
    const closed = new Promise<void>((resolve) => first.once('goaway', () => resolve()));
    const third = await used(); // the fourth connection: one over the three kept
    await closed;
    assert.ok(!watching.closed && !events.closed, 'the connection with a call open stays');
    assert.ok(!second.closed && !third.closed, 'the connections idle for less time stay');
    assert.ok(logLines.some((l) => l.includes('closing an idle CRI connection') && l.includes('too many open')));
    // A gRPC client whose connection was closed so reconnects for its next call.
    const { runtime } = client(sock);
    await runtime.version({ version: 'v1' });
    await used(); // closes the longest idle again: now the gRPC client's or `second`
    await used();
    assert.equal((await runtime.version({ version: 'v1' })).runtimeName, 'stove-test');
  });

  it('answers 300 clients that connect and call at once, every call on its first connection', async () => {
    // Beyond the connections kept, a new one must not close one that has not made its first call yet:
    // that call is on its way, and GOAWAY (last stream 0) refuses it: a raw HTTP/2 client sees the
    // refusal (138-172 of 300 calls before the fix), where grpc-js retries on a new connection.
    const sock = await serve({});
    const clients = 300;
    const worker = new Worker(new URL('./many-clients-main.js', import.meta.url), { workerData: { socket: sock, clients } });
    const [tally] = (await once(worker, 'message')) as [Record<string, number>];
    await worker.terminate();
    assert.deepEqual(tally, { ok: clients });
  });

  it('closes a connection that never calls, and one idle after its calls; a gRPC client reconnects, a quiet open call keeps its connection', async () => {
    const sock = await serve({ firstCallTimeoutMs: 200, idleConnectionTimeoutMs: 500 });
    const silent = connect(sock);
    await new Promise<void>((resolve) => silent.once('close', () => resolve()));
    assert.ok(logLines.some((l) => l.includes('closing an idle CRI connection') && l.includes('no call since it connected')));

    // One connection with an events stream open, one that made a call and then went quiet.
    const watching = connect(sock);
    const events = await openEvents(watching);
    const quiet = connect(sock);
    const goaway = new Promise<void>((resolve) => quiet.once('goaway', () => resolve()));
    await answeredVersion(quiet);
    await goaway;
    await new Promise<void>((resolve) => (quiet.closed ? resolve() : quiet.once('close', () => resolve())));
    assert.ok(!watching.closed && !events.closed, 'the connection with a call open is not idle, however quiet');

    const { runtime } = client(sock);
    await runtime.version({ version: 'v1' });
    await eventually('the client connection was closed for idleness', () => logLines.filter((l) => l.includes('no call in flight')).length >= 2, 5000);
    assert.equal((await runtime.version({ version: 'v1' })).runtimeName, 'stove-test', 'the client reconnected for its next call');
  });
});
