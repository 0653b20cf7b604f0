/**
 * The streaming server over SPDY, driven by the test SPDY client (test/helpers/spdy-client.ts) and a
 * scripted backend: upgrade and token rules, framing (compression across frames, split frames, PING,
 * ignored flow-control frames, RST), remotecommand v1–v5, stream accounting and timeouts, disconnects,
 * port-forward pairing and errors.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { AttachRequest, ExecRequest, PortForwardRequest } from '../../../src/gen/runtime/v1/api.js';
import { attach as criAttach } from '../../../src/cri/attach.js';
import { exec as criExec } from '../../../src/cri/exec.js';
import { portForward as criPortForward } from '../../../src/cri/port-forward.js';
import { silentLogger } from '../../../src/common/logger.js';
import { StreamingServer, type StreamingServerOptions } from '../../../src/streaming/server.js';
import { ClientStream, SPDY, SpdyClient, controlFrameBytes, dataFrameBytes, spdyUpgrade } from '../../helpers/spdy-client.js';
import { echoServerEachTest } from '../../helpers/echo-server.js';
import { FakeBackend } from './fake-backend.js';
import { eventually } from '../../helpers/wait.js';

const V4 = ['v4.channel.k8s.io', 'v3.channel.k8s.io', 'v2.channel.k8s.io', 'channel.k8s.io'];

describe('streaming server over SPDY', function () {
  this.timeout(20_000);
  const servers: StreamingServer[] = [];
  const clients: SpdyClient[] = [];
  let backend: FakeBackend;
  let server: StreamingServer;

  async function startServer(options: Partial<StreamingServerOptions> = {}): Promise<StreamingServer> {
    const s = new StreamingServer({ address: '127.0.0.1', port: 0, tokenTtlMs: 60_000, backend, lookup: backend, log: silentLogger, ...options });
    await s.start();
    servers.push(s);
    return s;
  }

  beforeEach(async () => {
    backend = new FakeBackend();
    server = await startServer();
  });

  afterEach(async () => {
    for (const c of clients.splice(0)) c.close();
    await Promise.all(servers.splice(0).map((s) => s.stop()));
  });

  async function execUrl(partial: Partial<ExecRequest>, s = server): Promise<string> {
    return (await criExec(s, ExecRequest.fromPartial({ containerId: 'ctr1', stdout: true, ...partial }))).url;
  }

  async function connect(url: string, protocols = V4): Promise<SpdyClient> {
    const r = await spdyUpgrade(url, protocols);
    assert.equal(r.status, 101, r.body);
    clients.push(r.client!);
    return r.client!;
  }

  /** Opens the streams in order, as client-go does, waiting for each reply. */
  async function openStreams(client: SpdyClient, types: string[]): Promise<Record<string, ClientStream>> {
    const out: Record<string, ClientStream> = {};
    for (const t of types) out[t] = await client.open({ streamtype: t });
    return out;
  }

  async function runExec(cmd: string[], types: string[], partial: Partial<ExecRequest> = {}, protocols = V4) {
    const url = await execUrl({ cmd, stdout: types.includes('stdout'), stderr: types.includes('stderr'), stdin: types.includes('stdin'), ...partial });
    const client = await connect(url, protocols);
    const streams = await openStreams(client, types);
    return { client, streams };
  }

  describe('upgrade and tokens', () => {
    it('answers 101 with the first protocol of the client that it supports', async () => {
      const r = await spdyUpgrade(await execUrl({ cmd: ['echo'] }), ['v9.channel.k8s.io', 'v5.channel.k8s.io', 'v4.channel.k8s.io']);
      clients.push(r.client!);
      assert.equal(r.status, 101);
      assert.deepEqual(r.headers['upgrade'], ['SPDY/3.1']);
      assert.deepEqual(r.headers['x-stream-protocol-version'], ['v5.channel.k8s.io']);
    });

    it('returns an absolute URL on the bound address with an unguessable token', async () => {
      const url = new URL(await execUrl({ cmd: ['echo'] }));
      assert.equal(url.protocol, 'http:');
      assert.equal(url.hostname, '127.0.0.1');
      assert.equal(url.origin, server.baseUrl);
      assert.match(url.pathname, /^\/exec\/[A-Za-z0-9_-]{22}$/);
      assert.equal(url.search, '');
    });

    it('404s an unknown, a used, an expired or a wrong-kind token, and runs nothing', async () => {
      const unknown = await spdyUpgrade(`${server.baseUrl}/exec/AAAAAAAAAAAAAAAAAAAAAA`, V4);
      assert.equal(unknown.status, 404);

      const url = await execUrl({ cmd: ['echo', 'once'] });
      const first = await spdyUpgrade(url, V4);
      clients.push(first.client!);
      assert.equal(first.status, 101);
      assert.equal((await spdyUpgrade(url, V4)).status, 404);

      const wrongKind = (await execUrl({ cmd: ['echo'] })).replace('/exec/', '/attach/');
      assert.equal((await spdyUpgrade(wrongKind, V4)).status, 404);

      // A TTL of zero: the token has expired by the time any request can use it.
      const short = await startServer({ tokenTtlMs: 0 });
      const expiring = await execUrl({ cmd: ['echo'] }, short);
      assert.equal((await spdyUpgrade(expiring, V4)).status, 404);

      assert.equal(backend.execs.length, 0);
    });

    it('refuses other methods, non-upgrade requests, missing or unknown protocols', async () => {
      assert.equal((await spdyUpgrade(await execUrl({ cmd: ['echo'] }), V4, { method: 'PUT' })).status, 405);

      const plainUrl = await execUrl({ cmd: ['echo'] });
      const plain = await fetch(plainUrl, { method: 'POST' });
      assert.equal(plain.status, 400);
      assert.match(await plain.text(), /unable to upgrade/);
      // The token was used by that request.
      assert.equal((await spdyUpgrade(plainUrl, V4)).status, 404);

      const none = await spdyUpgrade(await execUrl({ cmd: ['echo'] }), []);
      assert.equal(none.status, 400);
      assert.match(none.body, /X-Stream-Protocol-Version is required/i);

      const bad = await spdyUpgrade(await execUrl({ cmd: ['echo'] }), ['v9.channel.k8s.io']);
      assert.equal(bad.status, 403);
      assert.ok(bad.headers['x-accepted-stream-protocol-versions']!.includes('v4.channel.k8s.io'));
      assert.match(bad.body, /unable to negotiate protocol/);

      const pf = await criPortForward(server, PortForwardRequest.fromPartial({ podSandboxId: 'pod1' }));
      assert.equal((await spdyUpgrade(pf.url, V4)).status, 403);
      assert.equal(backend.execs.length, 0);
    });

    it('404s paths that are not streaming routes', async () => {
      assert.equal((await fetch(`${server.baseUrl}/`)).status, 404);
      assert.equal((await fetch(`${server.baseUrl}/exec/`)).status, 404);
      assert.equal((await fetch(`${server.baseUrl}/exec/abc/def`)).status, 404);
    });

    it('binds only the configured address', async () => {
      const port = Number(new URL(server.baseUrl).port);
      const err = await new Promise<NodeJS.ErrnoException | undefined>((resolve) => {
        const c = net.connect(port, '127.0.0.2');
        c.once('connect', () => {
          c.destroy();
          resolve(undefined);
        });
        c.once('error', resolve);
      });
      assert.equal(err?.code, 'ECONNREFUSED');
    });
  });

  describe('exec', () => {
    it('runs with stdout and stderr, writes the status, FINs every stream, then GOAWAY and close', async () => {
      const { client, streams } = await runExec(['echo', 'out', ';', 'err', 'oops'], ['error', 'stdout', 'stderr']);
      assert.deepEqual([streams.error!.id, streams.stdout!.id, streams.stderr!.id], [1, 3, 5]);
      assert.equal((await streams.stdout!.readAll()).toString(), 'out');
      assert.equal((await streams.stderr!.readAll()).toString(), 'oops');
      assert.equal((await streams.error!.readAll()).toString(), '{"metadata":{},"status":"Success"}');
      await client.waitClosed();
      assert.equal(client.controlFrames(SPDY.GOAWAY).length, 1);
      assert.equal(client.controlFrames(SPDY.SYN_REPLY).length, 3);
      // SYN_REPLY carries an empty header block.
      assert.equal(backend.execs[0]!.params.cmd[0], 'echo');
    });

    it('reports a non-zero exit code as NonZeroExitCode (v4) and as text (v3, v1)', async () => {
      const v4 = await runExec(['exit', '3'], ['error', 'stdout']);
      const status = JSON.parse((await v4.streams.error!.readAll()).toString());
      assert.equal(status.reason, 'NonZeroExitCode');
      assert.deepEqual(status.details.causes, [{ reason: 'ExitCode', message: '3' }]);

      for (const protocol of ['v3.channel.k8s.io', 'channel.k8s.io']) {
        const r = await runExec(['exit', '7'], ['error', 'stdout'], {}, [protocol]);
        assert.equal((await r.streams.error!.readAll()).toString(), 'command terminated with non-zero exit code: exit status 7');
      }
      const ok = await runExec(['echo', 'fine'], ['error', 'stdout'], {}, ['v2.channel.k8s.io']);
      assert.equal((await ok.streams.error!.readAll()).length, 0);
    });

    it('reports a command that cannot run as InternalError', async () => {
      const { streams } = await runExec(['fail', 'no such binary'], ['error', 'stdout']);
      const status = JSON.parse((await streams.error!.readAll()).toString());
      assert.equal(status.reason, 'InternalError');
      assert.equal(status.code, 500);
      assert.equal(status.message, 'Internal error occurred: error executing command in container: no such binary');
    });

    it('delivers stdin until FIN (stdin only, no stdout)', async () => {
      const { streams } = await runExec(['count'], ['error', 'stdin'], { stdout: false });
      streams.stdin!.write('abc');
      streams.stdin!.write('defg');
      streams.stdin!.end();
      await streams.error!.readAll();
      const { streams: s2 } = await runExec(['cat'], ['error', 'stdin', 'stdout']);
      s2.stdin!.write('ping-pong', true);
      assert.equal((await s2.stdout!.readAll()).toString(), 'ping-pong');
    });

    it('moves 5 MB out and 3 MB in without any WINDOW_UPDATE', async () => {
      const { client, streams } = await runExec(['big', '5000000'], ['error', 'stdout']);
      const out = await streams.stdout!.readAll(20_000);
      assert.equal(out.length, 5_000_000);
      assert.equal(client.controlFrames(SPDY.WINDOW_UPDATE).length, 0);

      const r = await runExec(['count'], ['error', 'stdin', 'stdout']);
      const chunk = Buffer.alloc(30_000, 'z');
      for (let i = 0; i < 100; i++) r.streams.stdin!.write(chunk);
      r.streams.stdin!.end();
      assert.equal((await r.streams.stdout!.readAll(20_000)).toString(), '3000000');
    });

    it('decodes frames split at every byte, with SETTINGS and WINDOW_UPDATE ignored', async () => {
      const url = await execUrl({ cmd: ['cat'], stdin: true });
      const client = await connect(url);
      const settings = controlFrameBytes(SPDY.SETTINGS, 0, Buffer.from([0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 100]));
      const windowUpdate = controlFrameBytes(SPDY.WINDOW_UPDATE, 0, Buffer.from([0, 0, 0, 1, 0, 0, 0x10, 0]));
      const frames: Buffer[] = [settings, windowUpdate];
      for (const t of ['error', 'stdin', 'stdout']) frames.push((await client.synStreamFrame({ streamtype: t })).frame);
      frames.push(dataFrameBytes(3, 0, Buffer.from('split ')), dataFrameBytes(3, 1, Buffer.from('bytes')));
      const all = Buffer.concat(frames);
      for (let i = 0; i < all.length; i++) {
        client.raw(all.subarray(i, i + 1));
        if (i % 16 === 0) await new Promise((r) => setImmediate(r));
      }
      assert.equal((await client.streams.get(5)!.readAll()).toString(), 'split bytes');
      assert.equal((await client.streams.get(1)!.readAll()).toString(), '{"metadata":{},"status":"Success"}');
    });

    it('echoes PINGs', async () => {
      const { client } = await runExec(['hang'], ['error', 'stdout']);
      const id = await client.ping();
      const echo = client.controlFrames(SPDY.PING).find((f) => f.payload.readUInt32BE(0) === id)!;
      assert.equal(echo.payload.length, 4);
    });

    it('refuses unknown and duplicate stream types with RST_STREAM', async () => {
      const url = await execUrl({ cmd: ['echo', 'x'] });
      const client = await connect(url);
      const odd = await client.open({ streamtype: 'bogus' });
      assert.equal(odd.reset, 3); // REFUSED_STREAM
      const first = await client.open({ streamtype: 'stdout' });
      const dup = await client.open({ streamtype: 'stdout' });
      assert.equal(dup.reset, 3);
      const error = await client.open({ streamtype: 'error' });
      assert.equal((await first.readAll()).toString(), 'x');
      assert.equal((await error.readAll()).toString(), '{"metadata":{},"status":"Success"}');
    });

    it('gives up when the client does not open all streams within the creation timeout', async () => {
      const quick = await startServer({ streamCreationTimeoutMs: 200 });
      const client = await connect(await execUrl({ cmd: ['echo', 'never'], stderr: true }, quick));
      await client.open({ streamtype: 'error' });
      await client.open({ streamtype: 'stdout' });
      await client.waitClosed(3000);
      assert.equal(backend.execs.length, 0);
    });

    it('aborts the backend when the client disconnects, resets or goes away', async () => {
      const a = await runExec(['hang'], ['error', 'stdout']);
      await a.client.ping();
      a.client.close();
      await eventually('1 aborted command', () => backend.aborted.length === 1);

      // client-go's Close(): RST on every stream, then GOAWAY.
      const b = await runExec(['hang'], ['error', 'stdout']);
      await b.client.ping();
      b.streams.stdout!.rst();
      b.streams.error!.rst();
      b.client.goAway();
      b.client.socket.end();
      await eventually('2 aborted commands', () => backend.aborted.length === 2);
    });

    it('closes an idle connection after the idle timeout', async () => {
      const idle = await startServer({ idleTimeoutMs: 300 });
      const client = await connect(await execUrl({ cmd: ['hang'] }, idle));
      await openStreams(client, ['error', 'stdout']);
      await client.waitClosed(3000);
      await eventually('1 aborted command', () => backend.aborted.length === 1);
    });

    it('passes terminal sizes from the resize stream (tty, v3+)', async () => {
      const url = await execUrl({ cmd: ['sizes', '2'], tty: true, stdin: true });
      const client = await connect(url);
      const s = await openStreams(client, ['error', 'stdin', 'stdout', 'resize']);
      s.resize!.write('{"Width":80,"Hei');
      s.resize!.write('ght":24}\n');
      // Sizes are latest-wins: the second is sent once the command has the first.
      await eventually('the first size to reach the command', () => backend.sizes.length === 1);
      s.resize!.write('{"Width":100,"Height":30}\n');
      assert.equal((await s.stdout!.readAll()).toString(), '80x24\n100x30\n');
      assert.equal(backend.execs[0]!.io.tty, true);
    });

    it('expects no resize stream before v3', async () => {
      const url = await execUrl({ cmd: ['echo', 'tty-v2'], tty: true });
      const client = await connect(url, ['v2.channel.k8s.io']);
      const s = await openStreams(client, ['error', 'stdout']);
      assert.equal((await s.stdout!.readAll()).toString(), 'tty-v2');
      assert.equal(backend.execs[0]!.io.resize, undefined);
    });

    it('RSTs data for a stream it does not know and drops the connection on a bad frame', async () => {
      const { client } = await runExec(['hang'], ['error', 'stdout']);
      client.raw(dataFrameBytes(99, 0, Buffer.from('stray')));
      await client.until(() => client.controlFrames(SPDY.RST_STREAM).some((f) => f.streamId === 99));
      const bad = controlFrameBytes(SPDY.PING, 0, Buffer.alloc(4));
      bad.writeUInt16BE(0x8002, 0); // SPDY/2
      client.raw(bad);
      await client.waitClosed(3000);
      await eventually('1 aborted command', () => backend.aborted.length === 1);
    });
  });

  describe('attach', () => {
    it('connects stdin and stdout and ends with a success status', async () => {
      const url = (await criAttach(server, AttachRequest.fromPartial({ containerId: 'ctr1', stdin: true, stdout: true }))).url;
      assert.match(url, /\/attach\//);
      const client = await connect(url);
      const s = await openStreams(client, ['error', 'stdin', 'stdout']);
      s.stdin!.write('typed', true);
      assert.equal((await s.stdout!.readAll()).toString(), 'attached\ntyped');
      assert.equal((await s.error!.readAll()).toString(), '{"metadata":{},"status":"Success"}');
    });

    it('reports a failed attach as InternalError', async () => {
      backend.attachScript = async () => {
        throw new Error('container is not running');
      };
      const url = (await criAttach(server, AttachRequest.fromPartial({ containerId: 'ctr1', stdout: true }))).url;
      const s = await openStreams(await connect(url), ['error', 'stdout']);
      const status = JSON.parse((await s.error!.readAll()).toString());
      assert.equal(status.message, 'Internal error occurred: error attaching to container: container is not running');
    });
  });

  describe('port-forward', () => {
    const echo = echoServerEachTest();

    async function pfClient(): Promise<SpdyClient> {
      const { url } = await criPortForward(server, PortForwardRequest.fromPartial({ podSandboxId: 'pod1', port: [echo.port] }));
      assert.match(url, /\/portforward\//);
      return connect(url, ['portforward.k8s.io']);
    }

    it('serves several connections and ports on one session, pairing streams by requestid', async () => {
      const client = await pfClient();
      const other = net.createServer((sock) => sock.end('other port'));
      await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
      const otherPort = String((other.address() as net.AddressInfo).port);
      const port = String(echo.port);
      try {
        // Interleaved creation, as concurrent accepts produce it.
        const e1 = await client.open({ streamtype: 'error', port, requestid: '1' });
        const e2 = await client.open({ streamtype: 'error', port, requestid: '2' });
        const e3 = await client.open({ streamtype: 'error', port: otherPort, requestid: '3' });
        const d2 = await client.open({ streamtype: 'data', port, requestid: '2' });
        const d3 = await client.open({ streamtype: 'data', port: otherPort, requestid: '3' });
        const d1 = await client.open({ streamtype: 'data', port, requestid: '1' });
        for (const e of [e1, e2, e3]) e.end();
        d1.write('first');
        d2.write('second');
        d1.end();
        d2.end();
        assert.equal((await d1.readAll()).toString(), 'first');
        assert.equal((await d2.readAll()).toString(), 'second');
        assert.equal((await d3.readAll()).toString(), 'other port');
        for (const e of [e1, e2, e3]) assert.equal((await e.readAll()).length, 0);
        assert.deepEqual(backend.forwards.map((f) => f.port).sort(), [echo.port, echo.port, Number(otherPort)].sort());
        assert.ok(backend.forwards.every((f) => f.pod === 'pod1'));
        // The session stays open for more connections.
        assert.equal(client.closed, false);
      } finally {
        other.close();
      }
    });

    it('pairs streams of clients that send no requestid by stream id', async () => {
      const client = await pfClient();
      const e = await client.open({ streamtype: 'error', port: String(echo.port) });
      const d = await client.open({ streamtype: 'data', port: String(echo.port) });
      d.write('legacy', true);
      assert.equal((await d.readAll()).toString(), 'legacy');
      assert.equal((await e.readAll()).length, 0);
    });

    it('reports a port with nothing listening on that pair’s error stream only', async () => {
      const dead = await new Promise<number>((resolve) => {
        const s = net.createServer().listen(0, '127.0.0.1', () => {
          const p = (s.address() as net.AddressInfo).port;
          s.close(() => resolve(p));
        });
      });
      const client = await pfClient();
      const e = await client.open({ streamtype: 'error', port: String(dead), requestid: '0' });
      await client.open({ streamtype: 'data', port: String(dead), requestid: '0' });
      const body = JSON.parse((await e.readAll()).toString());
      assert.equal(body.closeConnection, true);
      assert.match(body.message, new RegExp(`^error forwarding port ${dead} to pod pod1, uid : .*ECONNREFUSED`));
      // Another connection on the same session still works.
      const e2 = await client.open({ streamtype: 'error', port: String(echo.port), requestid: '1' });
      const d2 = await client.open({ streamtype: 'data', port: String(echo.port), requestid: '1' });
      d2.write('still fine', true);
      assert.equal((await d2.readAll()).toString(), 'still fine');
      assert.equal((await e2.readAll()).length, 0);
    });

    it('reports a connection reset by the target as recoverable (no closeConnection)', async () => {
      const resetting = net.createServer((sock) => sock.once('data', () => sock.resetAndDestroy()));
      await new Promise<void>((resolve) => resetting.listen(0, '127.0.0.1', resolve));
      const port = String((resetting.address() as net.AddressInfo).port);
      try {
        const client = await pfClient();
        const e = await client.open({ streamtype: 'error', port, requestid: '0' });
        const d = await client.open({ streamtype: 'data', port, requestid: '0' });
        d.write('trigger');
        const body = JSON.parse((await e.readAll()).toString());
        assert.equal(body.closeConnection, undefined);
        assert.match(body.message, /ECONNRESET/);
        await d.readAll();
      } finally {
        resetting.close();
      }
    });

    it('closes the target connection when the client goes away', async () => {
      let closed = false;
      // An echoing target: an answer proves the connection is open while the client is there.
      const holder = net.createServer((sock) => {
        sock.on('close', () => (closed = true));
        sock.pipe(sock);
      });
      await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
      const port = String((holder.address() as net.AddressInfo).port);
      try {
        const client = await pfClient();
        await client.open({ streamtype: 'error', port, requestid: '0' });
        const data = await client.open({ streamtype: 'data', port, requestid: '0' });
        data.write('ping');
        await data.until(() => data.received.toString() === 'ping');
        assert.equal(backend.forwards.length, 1);
        assert.equal(closed, false);
        client.close();
        await eventually('the target connection to close', () => closed);
      } finally {
        holder.close();
      }
    });

    it('refuses streams with a bad port or stream type and reports incomplete or duplicate pairs', async () => {
      const quick = await startServer({ streamCreationTimeoutMs: 200 });
      const { url } = await criPortForward(quick, PortForwardRequest.fromPartial({ podSandboxId: 'pod1' }));
      const client = await connect(url, ['portforward.k8s.io']);
      assert.equal((await client.open({ streamtype: 'data', port: '0', requestid: '9' })).reset, 3);
      assert.equal((await client.open({ streamtype: 'data', port: 'http', requestid: '9' })).reset, 3);
      assert.equal((await client.open({ streamtype: 'stdout', port: '80', requestid: '9' })).reset, 3);
      assert.equal((await client.open({ streamtype: 'data', requestid: '9' })).reset, 3);

      const lonely = await client.open({ streamtype: 'error', port: String(echo.port), requestid: '5' });
      assert.match((await lonely.readAll(3000)).toString(), /timed out waiting for streams/);

      const e = await client.open({ streamtype: 'error', port: String(echo.port), requestid: '6' });
      await client.open({ streamtype: 'error', port: String(echo.port), requestid: '6' });
      await e.until(() => e.received.length > 0);
      assert.match(e.received.toString(), /error stream already assigned/);
      assert.equal(backend.forwards.length, 0);
    });
  });

  describe('CRI requests', () => {
    it('validates exec and attach requests and looks the container up', async () => {
      const cases: [Partial<ExecRequest>, RegExp][] = [
        [{ containerId: '', cmd: ['x'], stdout: true }, /container_id is required/],
        [{ containerId: 'ctr1', cmd: ['x'], tty: true, stdout: true, stderr: true }, /tty and stderr cannot both be true/],
        [{ containerId: 'ctr1', cmd: ['x'] }, /one of stdin, stdout, or stderr must be set/],
        [{ containerId: 'ctr1', cmd: [], stdout: true }, /cmd is required/],
      ];
      for (const [req, message] of cases) {
        await assert.rejects(criExec(server, ExecRequest.fromPartial(req)), (err: { kind?: string; message: string }) => err.kind === 'InvalidArgument' && message.test(err.message));
      }
      await assert.rejects(criExec(server, ExecRequest.fromPartial({ containerId: 'gone', cmd: ['x'], stdout: true })), (err: { kind?: string; message: string }) => err.kind === 'NotFound' && /container "gone" not found/.test(err.message));
      await assert.rejects(criAttach(server, AttachRequest.fromPartial({ containerId: 'ctr1', tty: true, stderr: true, stdout: true })), { kind: 'InvalidArgument' });
      await assert.rejects(criAttach(server, AttachRequest.fromPartial({ containerId: 'ctr1' })), { kind: 'InvalidArgument' });
      await assert.rejects(criAttach(server, AttachRequest.fromPartial({ containerId: 'gone', stdout: true })), { kind: 'NotFound' });
      assert.equal(server.outstandingTokens, 0);
    });

    it('validates port-forward requests and looks the pod up', async () => {
      await assert.rejects(criPortForward(server, PortForwardRequest.fromPartial({})), { kind: 'InvalidArgument', message: 'pod_sandbox_id is required' });
      await assert.rejects(criPortForward(server, PortForwardRequest.fromPartial({ podSandboxId: 'pod1', port: [70000] })), { kind: 'InvalidArgument' });
      await assert.rejects(criPortForward(server, PortForwardRequest.fromPartial({ podSandboxId: 'nope' })), { kind: 'NotFound', message: 'pod sandbox "nope" not found' });
    });

    it('stores the canonical id the lookup returns, never anything from the URL', async () => {
      backend.container = async (id) => (id === 'ct' ? 'ctr1-full' : undefined);
      const url = await execUrl({ containerId: 'ct', cmd: ['echo', 'stored'] });
      const client = await connect(url + '?command=rm&stdin=1&tty=1');
      const s = await openStreams(client, ['error', 'stdout']);
      assert.equal((await s.stdout!.readAll()).toString(), 'stored');
      assert.equal(backend.execs[0]!.params.containerId, 'ctr1-full');
      assert.equal(backend.execs[0]!.io.stdin, undefined);
      assert.equal(backend.execs[0]!.io.tty, false);
    });

    it('caps outstanding URLs at 1000 (RESOURCE_EXHAUSTED)', async () => {
      for (let i = 0; i < 1000; i++) await execUrl({ cmd: ['echo'] });
      await assert.rejects(execUrl({ cmd: ['echo'] }), { kind: 'ResourceExhausted', message: 'maximum number of in-flight requests exceeded' });
    });
  });
});
