/**
 * The streaming server over WebSocket: channel framing for exec/attach (v5 with CLOSE, v4 base64,
 * no subprotocol), v4 port-forward channels, and the SPDY/3.1+portforward.k8s.io tunnel (through a
 * hand-rolled WebSocket client, since both `ws` and the WHATWG client refuse that protocol name).
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';
import { Duplex } from 'node:stream';
import WebSocket from 'ws';
import { ExecRequest, PortForwardRequest } from '../../../src/gen/runtime/v1/api.js';
import { exec as criExec } from '../../../src/cri/exec.js';
import { portForward as criPortForward } from '../../../src/cri/port-forward.js';
import { silentLogger } from '../../../src/common/logger.js';
import { StreamingServer } from '../../../src/streaming/server.js';
import { SpdyClient } from '../../helpers/spdy-client.js';
import { echoServerEachTest } from '../../helpers/echo-server.js';
import { FakeBackend } from './fake-backend.js';
import { eventually } from '../../helpers/wait.js';

interface Session {
  ws: WebSocket;
  messages: { data: Buffer; binary: boolean }[];
  closed: Promise<number>;
}

function open(url: string, protocols: string[]): Promise<Session> {
  const ws = new WebSocket(url.replace(/^http/, 'ws'), protocols);
  const messages: Session['messages'] = [];
  ws.on('message', (data, binary) => messages.push({ data: data as Buffer, binary }));
  const closed = new Promise<number>((resolve) => ws.on('close', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve({ ws, messages, closed }));
    ws.once('error', reject);
  });
}

/** Concatenated payloads per channel (binary framing). */
function channels(s: Session): Map<number, Buffer> {
  const out = new Map<number, Buffer>();
  for (const m of s.messages) out.set(m.data[0]!, Buffer.concat([out.get(m.data[0]!) ?? Buffer.alloc(0), m.data.subarray(1)]));
  return out;
}

describe('streaming server over WebSocket', function () {
  this.timeout(20_000);
  let backend: FakeBackend;
  let server: StreamingServer;

  beforeEach(async () => {
    backend = new FakeBackend();
    server = new StreamingServer({ address: '127.0.0.1', port: 0, tokenTtlMs: 60_000, backend, lookup: backend, log: silentLogger });
    await server.start();
  });
  afterEach(() => server.stop());

  const execUrl = async (partial: Partial<ExecRequest>) =>
    (await criExec(server, ExecRequest.fromPartial({ containerId: 'ctr1', stdout: true, ...partial }))).url;

  it('v5: announces the connection, frames stdout/stderr/status by channel, closes normally', async () => {
    const s = await open(await execUrl({ cmd: ['echo', 'out', ';', 'err', 'bad', ';', 'exit', '2'], stderr: true }), ['v5.channel.k8s.io']);
    assert.equal(s.ws.protocol, 'v5.channel.k8s.io');
    assert.equal(await s.closed, 1000);
    assert.deepEqual(s.messages[0]!.data, Buffer.from([1]));
    const ch = channels(s);
    assert.equal(ch.get(1)!.toString(), 'out');
    assert.equal(ch.get(2)!.toString(), 'bad');
    assert.equal(JSON.parse(ch.get(3)!.toString()).details.causes[0].message, '2');
    assert.ok(s.messages.every((m) => m.binary));
  });

  it('v5: stdin ends with the CLOSE signal [255, 0]', async () => {
    const s = await open(await execUrl({ cmd: ['cat', ';', 'echo', '|end'], stdin: true }), ['v5.channel.k8s.io']);
    s.ws.send(Buffer.concat([Buffer.from([0]), Buffer.from('typed')]));
    s.ws.send(Buffer.from([255, 0]));
    await s.closed;
    assert.equal(channels(s).get(1)!.toString(), 'typed|end');
  });

  it('v4 base64: text messages with an ASCII channel digit', async () => {
    const s = await open(await execUrl({ cmd: ['cat'], stdin: true }), ['v4.base64.channel.k8s.io']);
    s.ws.send('0' + Buffer.from('b64 in').toString('base64'));
    // No CLOSE before v5: the connection ends when the process does.
    const echoed = () => s.messages.some((m) => !m.binary && m.data.toString()[0] === '1' && Buffer.from(m.data.toString().slice(1), 'base64').toString().includes('b64 in'));
    await eventually('the echo', echoed);
    s.ws.close();
    await s.closed;
    const out = s.messages.filter((m) => !m.binary && m.data.toString()[0] === '1').map((m) => Buffer.from(m.data.toString().slice(1), 'base64'));
    assert.equal(Buffer.concat(out).toString(), 'b64 in');
  });

  it('without a subprotocol: binary channels and a text status (v1)', async () => {
    const s = await open(await execUrl({ cmd: ['exit', '5'] }), []);
    assert.equal(s.ws.protocol, '');
    await s.closed;
    assert.equal(channels(s).get(3)!.toString(), 'command terminated with non-zero exit code: exit status 5');
  });

  it('refuses an unknown subprotocol with 403 and a used token with 404', async () => {
    const url = await execUrl({ cmd: ['echo'] });
    const status = (protocols: string[]) =>
      new Promise<number>((resolve) => {
        const ws = new WebSocket(url.replace(/^http/, 'ws'), protocols);
        ws.on('unexpected-response', (_req, res) => resolve(res.statusCode!));
        ws.on('error', () => {});
      });
    assert.equal(await status(['v9.channel.k8s.io']), 403);
    assert.equal(await status(['v5.channel.k8s.io']), 404);
    assert.equal(backend.execs.length, 0);
  });

  it('passes resize messages (channel 4) and aborts the backend when the client leaves', async () => {
    const s = await open(await execUrl({ cmd: ['sizes', '1', ';', 'hang'], tty: true, stdin: true }), ['v5.channel.k8s.io']);
    s.ws.send(Buffer.concat([Buffer.from([4]), Buffer.from('{"Width":90,"Height":40}')]));
    await eventually('the size echoed', () => (channels(s).get(1)?.length ?? 0) > 0);
    assert.equal(channels(s).get(1)!.toString(), '90x40\n');
    s.ws.terminate();
    await eventually('the backend aborted', () => backend.aborted.length > 0);
    assert.equal(backend.aborted.length, 1);
  });

  describe('port-forward', () => {
    const echo = echoServerEachTest();

    it('v4 channels: per port a data and an error channel, each opened with the port (u16 LE)', async () => {
      const dead = await new Promise<number>((resolve) => {
        const t = net.createServer().listen(0, '127.0.0.1', () => {
          const p = (t.address() as net.AddressInfo).port;
          t.close(() => resolve(p));
        });
      });
      const { url } = await criPortForward(server, PortForwardRequest.fromPartial({ podSandboxId: 'pod1', port: [echo.port, dead] }));
      const s = await open(url, ['v4.channel.k8s.io']);
      await eventually('both ports announced', () => s.messages.length >= 4);
      const port = Buffer.alloc(2);
      port.writeUInt16LE(echo.port);
      assert.deepEqual(s.messages.filter((m) => m.data[0] === 0)[0]!.data.subarray(1), port);
      assert.deepEqual(s.messages.filter((m) => m.data[0] === 1)[0]!.data.subarray(1), port);
      s.ws.send(Buffer.concat([Buffer.from([0]), Buffer.from('over channels')]));
      await eventually('the echo and the refused port\'s error', () => /ECONNREFUSED/.test(channels(s).get(3)?.toString() ?? '') && (channels(s).get(0)?.length ?? 0) >= 15);
      assert.equal(channels(s).get(0)!.subarray(2).toString(), 'over channels');
      assert.match(channels(s).get(3)!.subarray(2).toString(), new RegExp(`^error forwarding port ${dead} to pod pod1, uid : .*ECONNREFUSED`));
      s.ws.close();
    });

    it('v4 channels need ports in the request', async () => {
      const { url } = await criPortForward(server, PortForwardRequest.fromPartial({ podSandboxId: 'pod1' }));
      const code = await new Promise<number>((resolve) => {
        const ws = new WebSocket(url.replace(/^http/, 'ws'), ['v4.channel.k8s.io']);
        ws.on('unexpected-response', (_req, res) => resolve(res.statusCode!));
        ws.on('error', () => {});
      });
      assert.equal(code, 400);
    });

    it('tunnels SPDY port-forward through WebSocket binary messages (SPDY/3.1+portforward.k8s.io)', async () => {
      const { url } = await criPortForward(server, PortForwardRequest.fromPartial({ podSandboxId: 'pod1' }));
      const { protocol, stream } = await rawWebSocket(url, 'SPDY/3.1+portforward.k8s.io');
      assert.equal(protocol, 'SPDY/3.1+portforward.k8s.io');
      const client = new SpdyClient(stream);
      try {
        const e = await client.open({ streamtype: 'error', port: String(echo.port), requestid: '0' });
        const d = await client.open({ streamtype: 'data', port: String(echo.port), requestid: '0' });
        e.end();
        d.write('through the tunnel', true);
        assert.equal((await d.readAll()).toString(), 'through the tunnel');
        assert.equal((await e.readAll()).length, 0);
        await client.ping();
      } finally {
        client.close();
      }
    });
  });
});

/**
 * A bare WebSocket client: handshake with an arbitrary Sec-WebSocket-Protocol, then a Duplex whose
 * writes become masked binary frames and whose reads are the payloads of binary frames.
 */
async function rawWebSocket(httpUrl: string, protocol: string): Promise<{ protocol: string; stream: Duplex }> {
  const u = new URL(httpUrl);
  const socket = net.connect(Number(u.port), u.hostname);
  await new Promise((resolve) => socket.once('connect', resolve));
  const key = randomBytes(16).toString('base64');
  socket.write(
    `GET ${u.pathname} HTTP/1.1\r\nHost: ${u.host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
      `Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Protocol: ${protocol}\r\n\r\n`,
  );
  let buf = Buffer.alloc(0);
  const head = await new Promise<string>((resolve) => {
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const i = buf.indexOf('\r\n\r\n');
      if (i < 0) return;
      socket.off('data', onData);
      const text = buf.subarray(0, i).toString();
      buf = buf.subarray(i + 4);
      resolve(text);
    };
    socket.on('data', onData);
  });
  assert.match(head, /^HTTP\/1\.1 101/);
  const accept = createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  assert.ok(head.includes(`Sec-WebSocket-Accept: ${accept}`));
  const negotiated = /Sec-WebSocket-Protocol: (.*)/i.exec(head)?.[1]?.trim() ?? '';

  const stream = new Duplex({
    read() {},
    write(chunk: Buffer, _enc, cb) {
      const mask = randomBytes(4);
      const len = chunk.length;
      const header = len < 126 ? Buffer.from([0x82, 0x80 | len]) : len < 65536 ? Buffer.alloc(4) : Buffer.alloc(10);
      if (len >= 126 && len < 65536) {
        header[0] = 0x82;
        header[1] = 0x80 | 126;
        header.writeUInt16BE(len, 2);
      } else if (len >= 65536) {
        header[0] = 0x82;
        header[1] = 0x80 | 127;
        header.writeBigUInt64BE(BigInt(len), 2);
      }
      const masked = Buffer.from(chunk);
      for (let i = 0; i < masked.length; i++) masked[i]! ^= mask[i % 4]!;
      socket.write(Buffer.concat([header, mask, masked]), cb);
    },
    destroy(_err, cb) {
      socket.destroy();
      cb(null);
    },
  });
  const parse = () => {
    for (;;) {
      if (buf.length < 2) return;
      const opcode = buf[0]! & 0x0f;
      let len = buf[1]! & 0x7f;
      let off = 2;
      if (len === 126) {
        if (buf.length < 4) return;
        len = buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (buf.length < 10) return;
        len = Number(buf.readBigUInt64BE(2));
        off = 10;
      }
      if (buf.length < off + len) return;
      const payload = buf.subarray(off, off + len);
      buf = buf.subarray(off + len);
      if (opcode === 2) stream.push(Buffer.from(payload));
      else if (opcode === 8) stream.push(null);
    }
  };
  socket.on('data', (d: Buffer) => {
    buf = Buffer.concat([buf, d]);
    parse();
  });
  socket.on('close', () => stream.destroy());
  parse();
  return { protocol: negotiated, stream };
}
