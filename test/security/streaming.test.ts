/**
 * A stream holder cannot stall the daemon or take more than its share: a real `stove serve` with small
 * session caps, a busybox container, and hostile SPDY clients — a header block repeating one name
 * 26,000 times, 16 MiB without a newline on a terminal's resize stream, more connections and streams
 * than the caps allow — while a second client times gRPC `Version`, which must keep answering within
 * 100 ms.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import zlib from 'node:zlib';
import { SPDY3_DICTIONARY } from '../../src/streaming/spdy-dictionary.js';
import { controlFrameBytes, spdyUpgrade, SPDY } from '../helpers/spdy-client.js';
import { COMMAND_PROTOCOLS, eventually, rejectsWith, parseStatus, StreamingWorld, streamingSuite, waitForText, writeChunked } from '../integration/streaming-e2e/world.js';

const MAX_PER_CONTAINER = 3;
const MAX_STREAMS = 8;
/** What the issue demands of the daemon while one client abuses its session. */
const VERSION_BUDGET_MS = 100;

/** Runs `abuse` while timing back-to-back `Version` calls; returns the slowest one in ms. */
async function slowestVersionDuring(world: StreamingWorld, abuse: () => Promise<void>): Promise<number> {
  let done = false;
  let slowest = 0;
  const timer = (async () => {
    while (!done) {
      const t0 = performance.now();
      await world.daemon.clients.runtime.version({ version: '' });
      slowest = Math.max(slowest, performance.now() - t0);
    }
  })();
  try {
    await abuse();
  } finally {
    done = true;
    await timer;
  }
  return slowest;
}

/**
 * The budget for the slowest `Version` while a client abuses its session: 100 ms, plus the slowest
 * `Version` while the daemon does the same amount of harmless work (`baseline`: a quiet wait, or as
 * many bytes on a stream whose input the daemon discards), so the load of a shared host and the cost
 * of moving the bytes at all do not read as a stall. The old parsers stalled the daemon for seconds.
 */
async function versionBudget(world: StreamingWorld, baseline: () => Promise<void>): Promise<number> {
  return VERSION_BUDGET_MS + (await slowestVersionDuring(world, baseline));
}

/** The daemon's resident set in bytes. */
async function rssOf(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
}

/** A SPDY/3 header block naming `name` `repeats` times, compressed as a connection's first block. */
function headerBomb(name: string, repeats: number): Buffer {
  const entry = Buffer.alloc(8 + name.length);
  entry.writeUInt32BE(name.length, 0);
  entry.write(name, 4);
  entry.writeUInt32BE(0, 4 + name.length);
  const count = Buffer.alloc(4);
  count.writeUInt32BE(repeats);
  const block = Buffer.concat([count, ...Array<Buffer>(repeats).fill(entry)]);
  return zlib.deflateSync(block, { dictionary: SPDY3_DICTIONARY, finishFlush: zlib.constants.Z_SYNC_FLUSH });
}

describe('security: streaming sessions are bounded (no stalled daemon)', function () {
  this.timeout(120_000);
  const world = new StreamingWorld();
  let pod: Awaited<ReturnType<StreamingWorld['pod']>>;
  let shell: string;

  const baseToml = world.pods.configToml.bind(world.pods);
  world.pods.configToml = () =>
    `${baseToml()}[streaming]\nmax_sessions_per_container = ${MAX_PER_CONTAINER}\nmax_streams_per_session = ${MAX_STREAMS}\n`;

  streamingSuite(world, 'streaming security tests', (p, s) => {
    pod = p;
    shell = s;
  });

  it('a header block repeating one name 26,000 times ends that connection and nothing else', async () => {
    const url = await world.execUrl({ containerId: shell, cmd: ['true'], stdout: true });
    const client = await world.connect(url);
    const payload = Buffer.alloc(10);
    payload.writeUInt32BE(1, 0);
    const bomb = Buffer.concat([payload, headerBomb('x', 26_000)]);
    assert.ok(bomb.length < 64 * 1024, `the compressed bomb is ${bomb.length} bytes`);

    const started = performance.now();
    const slowest = await slowestVersionDuring(world, async () => {
      client.raw(controlFrameBytes(SPDY.SYN_STREAM, 0, bomb));
      await client.waitClosed(10_000);
    });
    const quiet = performance.now() - started;
    const budget = await versionBudget(world, () => new Promise((r) => setTimeout(r, quiet)));
    assert.ok(slowest < budget, `Version took ${slowest.toFixed(1)} ms while the header bomb was parsed (budget ${budget.toFixed(1)} ms)`);
    await eventually('the protocol error to be logged', async () => /SPDY protocol error: header block/.test(world.daemon.output()));
    // The daemon goes on serving streams.
    assert.equal((await world.streamExec(shell, ['echo', 'still here'])).stdout, 'still here\n');
  });

  it('16 MiB without a newline on a resize stream is dropped in bounded memory; the session goes on', async () => {
    const url = await world.execUrl({ containerId: shell, cmd: ['sh'], stdin: true, stdout: true, tty: true });
    const s = await world.openCommand(url, { stdin: true, stdout: true, tty: true });
    s.resize!.write('{"Width":100,"Height":40}\n');
    s.stdin!.write('stty size\n');
    await waitForText(s.stdout!, '40 100');

    const pid = world.daemon.child.pid!;
    const before = await rssOf(pid);
    const flood = Buffer.alloc(16 << 20, 'x'.charCodeAt(0));
    const slowest = await slowestVersionDuring(world, async () => {
      await writeChunked(s.resize!, flood);
      // A PING after the flood: once it is echoed, the daemon has taken every byte before it.
      await s.client.ping();
    });
    const grown = (await rssOf(pid)) - before;
    // The same bytes on the stdout stream of another exec, whose client-sent data the daemon drops.
    const other = await world.openCommand(await world.execUrl({ containerId: shell, cmd: ['sleep', '60'], stdout: true }), { stdout: true });
    const budget = await versionBudget(world, async () => {
      await writeChunked(other.stdout!, flood);
      await other.client.ping();
    });
    assert.ok(slowest < budget, `Version took ${slowest.toFixed(1)} ms during the resize flood (budget ${budget.toFixed(1)} ms)`);
    assert.ok(grown < 64 << 20, `the daemon grew by ${(grown / 2 ** 20).toFixed(0)} MiB during the resize flood`);

    // The terminal still works; the flooded resize stream is simply ignored from then on.
    s.stdin!.write('exit 7\n');
    const status = parseStatus((await s.error.readAll(10_000)).toString());
    assert.equal(status.exitCode, 7);
  });

  it(`at most ${MAX_PER_CONTAINER} connections per container: the next URL and upgrade are refused naming the cap`, async () => {
    // A container of its own: sessions of earlier tests may still be ending on the shared one.
    const target = await world.run(pod, world.config('busybox', { command: ['sleep', '3600'] }));
    const spare = await world.execUrl({ containerId: target, cmd: ['cat'], stdin: true, stdout: true });
    const sessions = [];
    for (let i = 0; i < MAX_PER_CONTAINER; i++) {
      const url = await world.execUrl({ containerId: target, cmd: ['cat'], stdin: true, stdout: true });
      sessions.push(await world.openCommand(url, { stdin: true, stdout: true }));
    }
    await rejectsWith(world.execUrl({ containerId: target, cmd: ['true'], stdout: true }), 'RESOURCE_EXHAUSTED', /streaming\.max_sessions_per_container/);
    // A URL handed out before the cap was reached is refused at the upgrade.
    const refused = await spdyUpgrade(spare, COMMAND_PROTOCOLS);
    assert.equal(refused.status, 429);
    assert.match(refused.body, /streaming\.max_sessions_per_container/);

    // One session ends: there is room again.
    sessions[0]!.stdin!.end();
    await sessions[0]!.error.readAll(10_000);
    await sessions[0]!.client.waitClosed();
    for (const s of sessions.slice(1)) s.stdin!.end();
    // The daemon sees the socket close a moment after the client does; until then the URL is refused.
    let room = '';
    await eventually('room for another session', async () => {
      room = (await world.streamExec(target, ['echo', 'room'])).stdout;
      return true;
    });
    assert.equal(room, 'room\n');
  });

  it(`at most ${MAX_STREAMS} streams on a port-forward connection: the next is refused, the session goes on`, async () => {
    const url = await world.portForwardUrl(pod.id);
    const client = await world.connect(url, ['portforward.k8s.io']);
    // Error streams whose data streams never come: each is held open until the creation timeout.
    const held = [];
    for (let i = 0; i < MAX_STREAMS; i++) {
      const s = await client.open({ streamtype: 'error', port: '80', requestid: String(i) });
      assert.equal(s.reset, undefined, `stream ${i} was refused`);
      held.push(s);
    }
    const over = await client.open({ streamtype: 'error', port: '80', requestid: 'over' });
    assert.equal(over.reset, 3 /* REFUSED_STREAM */);
    await eventually('the refusal to be logged', async () => /streaming\.max_streams_per_session/.test(world.daemon.output()));
    // A stream that ends makes room: the data stream of request 1 completes its pair, which is forwarded
    // (nothing listens on port 80 in the pod, so its error stream says so).
    held[0]!.rst();
    await eventually('the reset stream to be dropped', async () => {
      const s = await client.open({ streamtype: 'data', port: '80', requestid: '1' });
      return s.reset === undefined;
    });
    await waitForText(held[1]!, /error forwarding port 80/);
    // Too many ports for one WebSocket connection is refused when the URL is asked for.
    const ports = Array.from({ length: MAX_STREAMS }, (_v, i) => 1000 + i);
    await rejectsWith(world.portForwardUrl(pod.id, ports), 'INVALID_ARGUMENT', /streaming\.max_streams_per_session/);
  });
});
