/**
 * HTTP/2 attacks on the real daemon's CRI socket, from a client that writes frames by hand
 * (test/helpers/h2-raw.ts). Each flood must leave the daemon's resident set less than 20 MiB larger,
 * `Version` on another connection must answer within a second while it runs and after it, and the
 * attacking connection must be cut off before it has sent its flood (or, for a client that stops
 * reading, its calls ended at the stall limit). Each malformed request of RFC 9113 §8 is refused with a
 * stream or connection error, after which the daemon serves the next connection. Last, a seeded,
 * time-bounded fuzz of the gRPC layer's request handling (prefixes, the compressed flag, grpc-timeout,
 * metadata) on the read-only RPCs.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import http2 from 'node:http2';
import net from 'node:net';
import { Worker } from 'node:worker_threads';
import fc from 'fast-check';
import { status } from '@grpc/grpc-js';
import { criClients, type CriClients } from '../helpers/cri-client.js';
import {
  FLAG,
  FRAME,
  H2_ERROR,
  NEWEST_ENTRY,
  RawHttp2Client,
  SETTING,
  callFields,
  emptyRequest,
  frame,
  headerBlock,
  tableInsert,
  type FloodResult,
} from '../helpers/h2-raw.js';
import { startStove, type StoveProcess } from '../helpers/stove-process.js';
import { eventually } from '../helpers/wait.js';

/** What an attack may add to the daemon's resident set. */
const MAX_RSS_GROWTH_MIB = 20;
/** How long `Version` on another connection may take, during an attack and after it. */
const MAX_VERSION_MS = 1000;
/** The daemon's response-stall limit and its limit for a connection's first call (src/api/server.ts). */
const RESPONSE_STALL_MS = 60_000;
const FIRST_CALL_MS = 30_000;

async function rssMiB(pid: number): Promise<number> {
  const line = (await readFile(`/proc/${pid}/status`, 'utf8')).split('\n').find((l) => l.startsWith('VmRSS:'));
  return Number(/(\d+)/.exec(line!)![1]) / 1024;
}

/**
 * Version calls one after another on their own connection, from a worker thread
 * (version-probe-main.ts), until stopped; the slowest one's time.
 */
function probeVersion(socket: string): { stop(): Promise<number> } {
  const worker = new Worker(new URL('./version-probe-main.js', import.meta.url), { workerData: { socket } });
  const slowest = new Promise<number>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`the Version probe exited (${code}) without an answer`)));
  });
  return {
    async stop() {
      worker.postMessage('stop');
      return await slowest;
    },
  };
}

/** 20,000 calls on one connection, half of them answered, half failed (a prefix promising more than comes). */
async function warmUp(socket: string): Promise<void> {
  const session = http2.connect('http://localhost', { createConnection: () => net.connect(socket) });
  session.on('error', () => {});
  const call = (failing: boolean) =>
    new Promise<void>((resolve) => {
      const req = session.request({ ':method': 'POST', ':path': '/runtime.v1.RuntimeService/Version', 'content-type': 'application/grpc', te: 'trailers' });
      req.on('error', () => {});
      req.resume();
      req.on('close', () => resolve());
      const prefix = Buffer.alloc(5);
      if (failing) prefix.writeUInt32BE(1000, 1);
      req.end(prefix);
    });
  try {
    for (let i = 0; i < 20_000; i++) await call(i % 2 === 1);
  } finally {
    session.destroy();
  }
}

describe('security: HTTP/2 attacks on the CRI socket (real daemon)', function () {
  this.timeout(120_000);
  let daemon: StoveProcess;
  let probeClients: CriClients;
  const attackers: RawHttp2Client[] = [];

  before(async () => {
    daemon = await startStove();
    probeClients = criClients(daemon.socket);
    // The code paths warm and the heap grown to its working size under load (some 45 MiB over the first
    // 10,000 calls, flat after that) before anything is measured.
    await warmUp(daemon.socket);
  });
  after(async () => {
    probeClients?.close();
    if (daemon) {
      await daemon.stop();
      await daemon.cleanup();
    }
  });
  afterEach(() => {
    for (const a of attackers.splice(0)) a.destroy();
  });

  async function attacker(options: Parameters<typeof RawHttp2Client.connect>[1] = {}): Promise<RawHttp2Client> {
    const client = await RawHttp2Client.connect(daemon.socket, options);
    attackers.push(client);
    return client;
  }

  /**
   * Runs `attack`, checking Version on another connection meanwhile and after, and the daemon's RSS
   * before and after (the attacking connection closed by then).
   */
  async function underAttack<T>(attack: () => Promise<T>): Promise<T> {
    const before = await rssMiB(daemon.child.pid!);
    const probe = probeVersion(daemon.socket);
    let result: T;
    try {
      result = await attack();
    } finally {
      for (const a of attackers.splice(0)) a.destroy();
    }
    const during = await probe.stop();
    assert.ok(during < MAX_VERSION_MS, `Version took ${during.toFixed(0)} ms during the attack`);
    const started = performance.now();
    assert.equal((await probeClients.runtime.version({ version: 'v1' })).runtimeName, 'stove');
    const afterMs = performance.now() - started;
    assert.ok(afterMs < MAX_VERSION_MS, `Version took ${afterMs.toFixed(0)} ms after the attack`);
    const grown = (await rssMiB(daemon.child.pid!)) - before;
    assert.ok(grown < MAX_RSS_GROWTH_MIB, `the daemon's RSS grew by ${grown.toFixed(1)} MiB`);
    return result;
  }

  /** The flood was cut off by the server: the connection closed with most of it unsent. */
  async function assertCutOff(flood: FloodResult, client: RawHttp2Client): Promise<void> {
    assert.ok(flood.cutOff, `the server took the whole flood (${flood.bytesTotal} bytes in ${flood.ms.toFixed(0)} ms)`);
    assert.ok(flood.bytesSent < flood.bytesTotal / 2, `the server took ${flood.bytesSent} of ${flood.bytesTotal} bytes before it cut the flood off`);
    await eventually('the connection closed', () => client.isClosed, 5000);
  }

  describe('floods', () => {
    it('CONTINUATION flood: one HEADERS without END_HEADERS, then 1,000,000 empty CONTINUATION frames', async () => {
      await underAttack(async () => {
        const client = await attacker();
        const start = frame(FRAME.HEADERS, 0, 1, headerBlock(callFields().slice(0, 2)));
        const empty = frame(FRAME.CONTINUATION, 0, 1);
        const flood = await client.flood(1_000_000, 10_000, (i) => (i === 0 ? start : empty));
        await assertCutOff(flood, client);
      });
    });

    it('rapid reset: 100,000 calls, each HEADERS then RST_STREAM at once', async () => {
      await underAttack(async () => {
        const client = await attacker();
        const headers = headerBlock(callFields());
        const cancel = Buffer.alloc(4);
        cancel.writeUInt32BE(H2_ERROR.CANCEL);
        const flood = await client.flood(100_000, 500, (i) =>
          Buffer.concat([frame(FRAME.HEADERS, FLAG.END_HEADERS, 2 * i + 1, headers), frame(FRAME.RST_STREAM, 0, 2 * i + 1, cancel)]),
        );
        await assertCutOff(flood, client);
      });
    });

    it('SETTINGS flood from a client that never reads', async () => {
      await underAttack(async () => {
        const client = await attacker({ read: false });
        const settings = Buffer.alloc(6);
        settings.writeUInt16BE(SETTING.MAX_CONCURRENT_STREAMS);
        settings.writeUInt32BE(100, 2);
        const flood = await client.flood(1_000_000, 10_000, () => frame(FRAME.SETTINGS, 0, 0, settings));
        await assertCutOff(flood, client);
      });
    });

    it('PING flood from a client that never reads', async () => {
      await underAttack(async () => {
        const client = await attacker({ read: false });
        const flood = await client.flood(1_000_000, 10_000, (i) => {
          const payload = Buffer.alloc(8);
          payload.writeUInt32BE(i, 4);
          return frame(FRAME.PING, 0, 0, payload);
        });
        await assertCutOff(flood, client);
      });
    });

    it(`WINDOW_UPDATE flood from a client that never reads: read in constant memory, the connection closed at the first-call limit (${FIRST_CALL_MS / 1000} s)`, async function () {
      this.timeout(FIRST_CALL_MS + 60_000);
      await underAttack(async () => {
        // node:http2 counts no WINDOW_UPDATE frames, and they ask for no answer: nghttp2 reads them at
        // the socket's pace in constant memory, and a connection that makes no call is closed.
        const connected = performance.now();
        const client = await attacker({ read: false });
        const one = Buffer.alloc(4);
        one.writeUInt32BE(1);
        await client.flood(1_000_000, 10_000, () => frame(FRAME.WINDOW_UPDATE, 0, 0, one));
        // Reading again, to see the connection's end.
        client.startReading();
        await eventually('the connection closed', () => client.isClosed, FIRST_CALL_MS + 15_000);
        const took = performance.now() - connected;
        assert.ok(took < FIRST_CALL_MS + 5_000, `closed after ${took.toFixed(0)} ms`);
      });
    });

    it('16,000 calls from a client that never reads their answers', async () => {
      await underAttack(async () => {
        const client = await attacker({ read: false });
        const headers = headerBlock(callFields());
        const flood = await client.flood(16_000, 100, (i) => Buffer.concat([frame(FRAME.HEADERS, FLAG.END_HEADERS, 2 * i + 1, headers), emptyRequest(2 * i + 1)]));
        await assertCutOff(flood, client);
      });
    });

    it(`HPACK bomb: one large dynamic-table entry referred to many times; each call reset, the connection closed at the first-call limit (${FIRST_CALL_MS / 1000} s)`, async function () {
      this.timeout(FIRST_CALL_MS + 60_000);
      await underAttack(async () => {
        const connected = performance.now();
        const client = await attacker();
        // A 4000-byte entry (nearly the whole 4096-byte table), then 12,000 one-byte references to it
        // in each block: 48 MB of header list from 16 KiB, 2000 times.
        const insert = tableInsert('x-bomb', 'b'.repeat(4000));
        const refs = Buffer.alloc(12_000, NEWEST_ENTRY[0]);
        const calls = 2000;
        await client.flood(calls, 10, (i) => {
          const block = Buffer.concat([headerBlock(callFields()), ...(i === 0 ? [insert] : []), refs]);
          return frame(FRAME.HEADERS, FLAG.END_HEADERS | FLAG.END_STREAM, 2 * i + 1, block);
        });
        // node:http2 stops each header list at 64 KiB (16 KiB once the client acknowledged the
        // server's SETTINGS) and resets its stream; it counts no such resets, so a connection that
        // only does this is closed as one that never calls.
        await eventually(`all ${calls} bombs reset`, () => client.frames.filter((f) => f.type === FRAME.RST_STREAM).length === calls, 20_000);
        assert.ok(client.frames.every((f) => f.type !== FRAME.HEADERS), 'a bomb was answered');
        await eventually('the connection closed', () => client.isClosed, FIRST_CALL_MS + 15_000);
        const took = performance.now() - connected;
        assert.ok(took < FIRST_CALL_MS + 5_000, `closed after ${took.toFixed(0)} ms`);
      });
    });

    it(`a zero flow-control window held for the stall limit: the calls are reset at ${RESPONSE_STALL_MS / 1000} s`, async function () {
      this.timeout(RESPONSE_STALL_MS + 60_000);
      await underAttack(async () => {
        // A client that grants no window: no answer's DATA can reach it.
        const client = await attacker({ settings: [[SETTING.INITIAL_WINDOW_SIZE, 0]] });
        const headers = headerBlock(callFields());
        const started = performance.now();
        const calls = 500;
        await client.flood(calls, 50, (i) => Buffer.concat([frame(FRAME.HEADERS, FLAG.END_HEADERS, 2 * i + 1, headers), emptyRequest(2 * i + 1)]));
        const resets = () => client.frames.filter((f) => f.type === FRAME.RST_STREAM && f.code === H2_ERROR.CANCEL).length;
        await eventually(`all ${calls} calls reset`, () => resets() === calls || client.isClosed, RESPONSE_STALL_MS + 30_000);
        const took = performance.now() - started;
        assert.ok(took >= RESPONSE_STALL_MS - 100, `reset after ${took.toFixed(0)} ms, before the stall limit`);
        assert.ok(took < RESPONSE_STALL_MS + 5_000, `reset after ${took.toFixed(0)} ms`);
      });
    });
  });

  describe('malformed requests (RFC 9113 §8)', () => {
    /**
     * Sends `headers` (and `then`) on a new connection; returns the error the server answered with:
     * RST_STREAM on stream 1, or GOAWAY.
     */
    async function refusal(fields: [string, string][], then: (client: RawHttp2Client) => Promise<unknown> = async () => {}, endStream = true): Promise<string> {
      const client = await attacker();
      await client.write(frame(FRAME.HEADERS, FLAG.END_HEADERS | (endStream ? FLAG.END_STREAM : 0), 1, headerBlock(fields)));
      await then(client);
      const seen = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no stream or connection error; frames: ${JSON.stringify(client.frames)}`)), 5000);
        const check = setInterval(() => {
          const rst = client.find((f) => f.type === FRAME.RST_STREAM && f.stream === 1);
          const goaway = client.find((f) => f.type === FRAME.GOAWAY && f.code !== H2_ERROR.NO_ERROR);
          const answered = client.find((f) => f.type === FRAME.HEADERS && f.stream === 1);
          if (answered) reject(new Error('the request was answered'));
          const found = rst ? `RST_STREAM ${rst.code}` : goaway ? `GOAWAY ${goaway.code}` : undefined;
          if (found || answered) {
            clearTimeout(timer);
            clearInterval(check);
            if (found) resolve(found);
          }
        }, 10);
      });
      client.destroy();
      // The daemon serves the next connection.
      const next = criClients(daemon.socket);
      try {
        assert.equal((await next.runtime.version({ version: 'v1' })).runtimeName, 'stove');
      } finally {
        next.close();
      }
      return seen;
    }

    const without = (name: string) => callFields().filter(([n]) => n !== name);
    /** RFC 9113 §8.1.1: a malformed request is a stream error of type PROTOCOL_ERROR. */
    const PROTOCOL = `RST_STREAM ${H2_ERROR.PROTOCOL_ERROR}`;

    for (const name of [':method', ':scheme', ':path']) {
      it(`refuses a request without ${name}`, async () => {
        assert.equal(await refusal(without(name)), PROTOCOL);
      });
    }

    it('refuses an empty :path', async () => {
      const fields = callFields().map(([n, v]): [string, string] => [n, n === ':path' ? '' : v]);
      assert.equal(await refusal(fields), PROTOCOL);
    });

    for (const [name, value] of [
      ['connection', 'keep-alive'],
      ['keep-alive', 'timeout=5'],
      ['transfer-encoding', 'chunked'],
      ['upgrade', 'h2c'],
      ['proxy-connection', 'keep-alive'],
    ]) {
      it(`refuses the connection-specific field ${name}`, async () => {
        assert.equal(await refusal(callFields('Version', [[name!, value!]])), PROTOCOL);
      });
    }

    it('refuses te other than trailers', async () => {
      const fields = callFields().map(([n, v]): [string, string] => [n, n === 'te' ? 'gzip' : v]);
      assert.equal(await refusal(fields), PROTOCOL);
    });

    it('refuses a content-length that does not match the DATA received', async () => {
      const code = await refusal(callFields('Version', [['content-length', '50']]), (c) => c.write(emptyRequest(1)), false);
      assert.equal(code, PROTOCOL);
    });

    it('ignores request trailers on a stream it reset, and serves the connection on', async () => {
      const client = await attacker();
      // A prefix promising more than a message may hold: answered RESOURCE_EXHAUSTED at once and reset.
      const prefix = Buffer.alloc(5);
      prefix.writeUInt32BE((16 << 20) + 1, 1);
      await client.write(Buffer.concat([frame(FRAME.HEADERS, FLAG.END_HEADERS, 1, headerBlock(callFields())), frame(FRAME.DATA, 0, 1, prefix)]));
      await eventually('stream 1 reset', () => client.find((f) => f.type === FRAME.RST_STREAM && f.stream === 1) !== undefined);
      // Trailers on the reset stream, then a good call on the same connection.
      await client.write(frame(FRAME.HEADERS, FLAG.END_HEADERS | FLAG.END_STREAM, 1, headerBlock([['x-late', 'trailer']])));
      await client.write(Buffer.concat([frame(FRAME.HEADERS, FLAG.END_HEADERS, 3, headerBlock(callFields())), emptyRequest(3)]));
      await eventually('stream 3 answered to its end', () => client.frames.some((f) => f.type === FRAME.HEADERS && f.stream === 3 && f.flags & FLAG.END_STREAM));
      assert.ok(!client.find((f) => f.type === FRAME.GOAWAY), 'the connection was ended');
    });

    it('refuses a GOAWAY with a short payload as a connection error', async () => {
      const client = await attacker();
      await client.write(frame(FRAME.GOAWAY, 0, 0, Buffer.alloc(4)));
      await client.closed;
      const goaway = client.find((f) => f.type === FRAME.GOAWAY);
      assert.equal(goaway?.code, H2_ERROR.FRAME_SIZE_ERROR);
      const next = criClients(daemon.socket);
      try {
        assert.equal((await next.runtime.version({ version: 'v1' })).runtimeName, 'stove');
      } finally {
        next.close();
      }
    });
  });

  it('fuzz: prefixes, the compressed flag, grpc-timeout and metadata on the read-only RPCs get a status, and the daemon serves on (seeded, 20 s)', async function () {
    this.timeout(60_000);
    const before = await rssMiB(daemon.child.pid!);
    const session = http2.connect('http://localhost', { createConnection: () => net.connect(daemon.socket) });
    session.on('error', () => {});
    const methods = ['Version', 'Status', 'ListContainers', 'ListPodSandbox', 'ListContainerStats', 'RuntimeConfig'];
    const timeout = fc.oneof(
      fc.tuple(fc.integer({ min: 0, max: 99_999_999 }), fc.constantFrom('H', 'M', 'S', 'm', 'u', 'n')).map(([n, u]) => `${n}${u}`),
      fc.string({ maxLength: 40 }).filter((s) => /^[\x21-\x7e]*$/.test(s)),
    );
    const token = fc.stringMatching(/^[a-z][a-z0-9-]{0,30}$/).filter((k) => !k.startsWith('grpc-') && !['te', 'connection', 'keep-alive', 'upgrade', 'transfer-encoding', 'proxy-connection', 'host', 'content-length', 'content-type'].includes(k));
    const request = fc.record({
      method: fc.constantFrom(...methods),
      flag: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 255 })),
      length: fc.oneof(fc.constant(-1), fc.integer({ min: 0, max: 0xffffffff })),
      body: fc.uint8Array({ maxLength: 200 }),
      timeout: fc.option(timeout),
      encoding: fc.option(fc.constantFrom('identity', 'gzip', 'deflate', 'x')),
      metadata: fc.dictionary(token, fc.string({ maxLength: 100 }).filter((s) => /^[\x20-\x7e]*$/.test(s)), { maxKeys: 8 }),
      split: fc.integer({ min: 0, max: 210 }),
    });
    /** One call; resolves with its grpc-status, or -1 for a stream reset. */
    const send = (r: typeof request extends fc.Arbitrary<infer T> ? T : never) =>
      new Promise<number>((resolve) => {
        const headers: http2.OutgoingHttpHeaders = { ':method': 'POST', ':path': `/runtime.v1.RuntimeService/${r.method}`, 'content-type': 'application/grpc', te: 'trailers', ...r.metadata };
        if (r.timeout !== null) headers['grpc-timeout'] = r.timeout;
        if (r.encoding !== null) headers['grpc-encoding'] = r.encoding;
        const req = session.request(headers);
        let code: number | undefined;
        req.on('response', (h) => h['grpc-status'] !== undefined && (code = Number(h['grpc-status'])));
        req.on('trailers', (t) => t['grpc-status'] !== undefined && (code = Number(t['grpc-status'])));
        req.on('error', () => {});
        req.resume();
        req.on('close', () => resolve(code ?? -1));
        const prefix = Buffer.alloc(5);
        prefix[0] = r.flag;
        prefix.writeUInt32BE(r.length < 0 ? r.body.length : r.length, 1);
        const bytes = Buffer.concat([prefix, r.body]);
        req.write(bytes.subarray(0, r.split));
        req.end(bytes.subarray(r.split));
      });
    const seen = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(request, async (r) => {
        const code = await send(r);
        seen.set(code, (seen.get(code) ?? 0) + 1);
        // A gRPC status (OK or an error), never a reset or a connection lost.
        return code >= 0 && code <= 16;
      }),
      { seed: 20261202, numRuns: 100_000, interruptAfterTimeLimit: 20_000, markInterruptAsFailure: false },
    );
    session.destroy();
    assert.ok((seen.get(status.OK) ?? 0) > 0 && (seen.get(status.INTERNAL) ?? 0) > 0, `statuses seen: ${JSON.stringify([...seen])}`);
    assert.equal((await probeClients.runtime.version({ version: 'v1' })).runtimeName, 'stove');
    const grown = (await rssMiB(daemon.child.pid!)) - before;
    assert.ok(grown < MAX_RSS_GROWTH_MIB, `the daemon's RSS grew by ${grown.toFixed(1)} MiB`);
  });
});
