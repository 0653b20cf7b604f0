/**
 * The streaming server against the real crictl (v1.32 and v1.36, the Go client-go/spdystream stack the
 * kubelet uses): a small gRPC server answers Version/Status (and ImageFsInfo, which crictl 1.36 asks
 * first) and hands out URLs from a StreamingServer whose
 * backend runs processes on the host (test/helpers/host-backend.ts). Everything stays on loopback.
 * Skipped with a printed reason where crictl is not installed (as on CI).
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { access, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ImageFsInfoResponse, StatusResponse, VersionResponse } from '../../../src/gen/runtime/v1/api.js';
import { criServices } from '../../../src/api/services.js';
import { serveGrpc, type GrpcEndpoint } from '../../../src/api/server.js';
import type { RuntimeHandlers } from '../../../src/api/handlers.js';
import { silentLogger } from '../../../src/common/logger.js';
import { NO_TELEMETRY } from '../../../src/observability/hooks.js';
import { attach } from '../../../src/cri/attach.js';
import { exec } from '../../../src/cri/exec.js';
import { portForward } from '../../../src/cri/port-forward.js';
import { StreamingServer } from '../../../src/streaming/server.js';
import { pidExists } from '../../helpers/process.js';
import { HostBackend } from '../../helpers/host-backend.js';
import { eventually, waitFor } from '../../helpers/wait.js';

const CRICTL = process.env.CRICTL ?? '/usr/local/bin/crictl';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

describe('streaming server with the real crictl', function () {
  this.timeout(60_000);
  let dir: string;
  let sock: string;
  let grpc: GrpcEndpoint | undefined;
  let streaming: StreamingServer;
  let backend: HostBackend;
  /** crictl's global flags: a config file of our own (no warning about a missing /etc/crictl.yaml). */
  let globalArgs: string[];

  before(async function () {
    const present = await access(CRICTL).then(() => true, () => false);
    if (!present) {
      console.log(`    skipped: ${CRICTL} not found (crictl is not installed on this machine)`);
      this.skip();
    }
    dir = await mkdtemp(join(tmpdir(), 'stove-streaming-'));
    sock = join(dir, 'cri.sock');
    const config = join(dir, 'crictl.yaml');
    await writeFile(config, `runtime-endpoint: unix://${sock}\nimage-endpoint: unix://${sock}\ntimeout: 10\n`);
    globalArgs = ['--config', config];
    backend = new HostBackend();
    streaming = new StreamingServer({ address: '127.0.0.1', port: 0, tokenTtlMs: 60_000, backend, lookup: backend, log: silentLogger });
    await streaming.start();
    const handlers: Partial<RuntimeHandlers> = {
      version: async () =>
        VersionResponse.fromPartial({ version: '0.1.0', runtimeName: 'stove-test', runtimeVersion: '0.0.0', runtimeApiVersion: 'v1' }),
      status: async () => StatusResponse.fromPartial({ status: { conditions: [] } }),
      exec: (r) => exec(streaming, r),
      attach: (r) => attach(streaming, r),
      portForward: (r) => portForward(streaming, r),
    };
    // crictl 1.36 checks the image API (ImageFsInfo) of the endpoint before any command.
    grpc = await serveGrpc(sock, criServices(handlers, { imageFsInfo: async () => ImageFsInfoResponse.fromPartial({}) }, silentLogger, NO_TELEMETRY), silentLogger);
  });

  after(async () => {
    backend?.killAll();
    await streaming?.stop();
    await grpc?.shutdown();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  function crictl(args: string[], input?: string | Buffer, timeoutMs = 30_000): Promise<Run> {
    return new Promise((resolve) => {
      const child = execFile(
        CRICTL,
        [...globalArgs, ...args],
        { encoding: 'buffer', maxBuffer: 64 << 20, timeout: timeoutMs },
        (err, stdout, stderr) => {
          const code = err ? ((err as { code?: unknown }).code as number | null) : 0;
          resolve({ code: typeof code === 'number' ? code : null, stdout: stdout.toString('latin1'), stderr: stderr.toString() });
        },
      );
      if (input !== undefined) child.stdin!.end(input);
      else child.stdin!.end();
    });
  }

  it('execs a command and reports its output and exit code', async () => {
    const r = await crictl(['exec', 'ctr1', 'sh', '-c', 'echo hi; echo oops >&2; exit 3']);
    assert.equal(r.stdout, 'hi\n');
    // crictl 1.32 prints the error as is, 1.36 as a logrus line (`time=… level=fatal msg="…"`).
    assert.match(r.stderr, /^oops\n(?:time="[^"]+" level=fatal msg=")?execing command in container ctr1: command terminated with exit code 3"?\n$/);
    assert.equal(r.code, 1);
  });

  it('exits 0 with exactly the output (critest: echo -n hello)', async () => {
    const r = await crictl(['exec', 'ctr1', 'echo', '-n', 'hello']);
    assert.deepEqual(r, { code: 0, stdout: 'hello', stderr: '' });
  });

  it('passes stdin with exec -i', async () => {
    const r = await crictl(['exec', '-i', 'ctr1', 'sh', '-c', 'tr a-z A-Z; echo done'], 'hello stdin\n');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'HELLO STDIN\ndone\n');
  });

  it('moves 5 MB of output and 3 MB of input intact', async () => {
    const r = await crictl(['exec', 'ctr1', 'sh', '-c', 'head -c 5000000 /dev/zero | tr "\\0" "x"']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.length, 5_000_000);
    assert.ok(/^x+$/.test(r.stdout));
    const input = Buffer.alloc(3_000_000, 'abcdefghij');
    const r2 = await crictl(['exec', '-i', 'ctr1', 'sh', '-c', 'wc -c; cat > /dev/null'], input);
    assert.equal(r2.code, 0, r2.stderr);
    assert.equal(r2.stdout.trim(), '3000000');
  });

  it('execs over WebSocket (--transport websocket, v5.channel.k8s.io)', async () => {
    const r = await crictl(['exec', '--transport', 'websocket', 'ctr1', 'sh', '-c', 'echo ws-out; echo ws-err >&2; exit 4']);
    assert.equal(r.stdout, 'ws-out\n');
    assert.match(r.stderr, /^ws-err\n(?:time="[^"]+" level=fatal msg=")?execing command in container ctr1: command terminated with exit code 4"?\n$/);
    const r2 = await crictl(['exec', '-i', '--transport', 'websocket', 'ctr1', 'sh', '-c', 'cat; echo end'], 'via websocket\n');
    assert.equal(r2.code, 0, r2.stderr);
    assert.equal(r2.stdout, 'via websocket\nend\n');
    const r3 = await crictl(['exec', '--transport', 'websocket', 'ctr1', 'sh', '-c', 'head -c 3000000 /dev/zero']);
    assert.equal(r3.code, 0, r3.stderr);
    assert.equal(r3.stdout.length, 3_000_000);
  });

  for (const transport of ['spdy', 'websocket']) {
    it(`runs exec -it under a terminal over ${transport}: types a command, reads the answer, gets the size and exit code`, async () => {
      const before = backend.resizes.length;
      // `script` gives crictl a pseudo-terminal; the backend runs sh on another one.
      // The terminal starts at 101x33, which crictl reports as the first resize.
      const command = `stty cols 101 rows 33; ${CRICTL} ${globalArgs.join(' ')} exec --transport ${transport} -it ctr1 sh`;
      const child = spawn('script', ['-qec', command, '/dev/null'], {
        stdio: ['pipe', 'pipe', 'pipe'],
        env: { ...process.env, TERM: 'dumb' },
      });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      child.stdin.write('echo answer-$((6*7))\n');
      await eventually('the answer from sh', () => /answer-42/.test(out), 15_000).catch((err: unknown) => {
        throw new Error(`${(err as Error).message}; output ${JSON.stringify(out)}`);
      });
      child.stdin.write('exit 5\n');
      const code = await exited;
      assert.notEqual(code, 0, out);
      assert.match(out, /command terminated with exit code 5/);
      assert.deepEqual(backend.resizes.slice(before), [{ width: 101, height: 33 }]);
    });
  }

  it('forwards a port: two concurrent fetches through one session', async () => {
    const target = await pairedTarget();
    const local = await freePort();
    const child = spawn(CRICTL, [...globalArgs, 'port-forward', 'pod1', `${local}:${target.port}`], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    try {
      await waitForPort(local);
      const [a, b] = await Promise.all([fetchText(`http://127.0.0.1:${local}/a`), fetchText(`http://127.0.0.1:${local}/b`)]);
      assert.equal(a, 'hello from /a');
      assert.equal(b, 'hello from /b');
      assert.equal(target.hits(), 2);
      // The session survives: a third request on a new connection.
      assert.equal(await fetchText(`http://127.0.0.1:${local}/c`), 'hello from /c');
    } finally {
      child.kill('SIGINT');
      target.close();
    }
    assert.ok(!/error/i.test(out), out);
  });

  it('forwards a port over WebSocket (SPDY/3.1+portforward.k8s.io tunnel)', async () => {
    const target = await pairedTarget();
    const local = await freePort();
    const child = spawn(
      CRICTL,
      [...globalArgs, 'port-forward', '--transport', 'websocket', 'pod1', `${local}:${target.port}`],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    try {
      await waitForPort(local);
      const [a, b] = await Promise.all([fetchText(`http://127.0.0.1:${local}/x`), fetchText(`http://127.0.0.1:${local}/y`)]);
      assert.equal(a, 'hello from /x');
      assert.equal(b, 'hello from /y');
    } finally {
      child.kill('SIGINT');
      target.close();
    }
  });

  it('reports a port with nothing listening on the error stream', async () => {
    const dead = await freePort();
    const local = await freePort();
    const child = spawn(CRICTL, [...globalArgs, 'port-forward', 'pod1', `${local}:${dead}`], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    try {
      await waitForPort(local);
      await fetchText(`http://127.0.0.1:${local}/`).catch(() => '');
      await eventually('crictl to report the refused connection', () => /ECONNREFUSED/.test(out), 15_000).catch(() => {});
      assert.match(out, /error forwarding port \d+ to pod pod1, uid : .*ECONNREFUSED/);
    } finally {
      child.kill('SIGINT');
    }
  });

  it('attaches with stdin to a running process (stdin_once)', async () => {
    backend.startContainer('att1', 'while read l; do echo "got:$l"; echo "err:$l" >&2; [ "$l" = quit ] && exit 0; done; echo eof', {
      stdin: true,
      stdinOnce: true,
    });
    const r = await crictl(['attach', '-i', 'att1'], 'one\nquit\n');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'got:one\ngot:quit\n');
    assert.match(r.stderr, /err:one\nerr:quit\n/);
  });

  it('attaches without stdin_once: stdin EOF ends the attach, the process keeps its stdin', async () => {
    const c = backend.startContainer('att2', 'while read l; do echo "got:$l"; done; echo stdin-closed', { stdin: true, stdinOnce: false });
    // Output that comes after the client's stdin ended is not the client's any more, so type, read, then end.
    for (const word of ['one', 'two']) {
      const child = spawn(CRICTL, [...globalArgs, 'attach', '-i', 'att2'], { stdio: ['pipe', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      child.stdin.write(`${word}\n`);
      await eventually(`the answer to ${word}`, () => out.includes(`got:${word}`), 15_000).catch(() => {});
      child.stdin.end();
      assert.equal(await exited, 0);
      assert.equal(out, `got:${word}\n`);
    }
    assert.equal(c.process.exitCode, null);
  });

  it('kills the process when the client goes away', async () => {
    const pidFile = join(dir, 'sleeper.pid');
    const child = spawn(CRICTL, [...globalArgs, 'exec', 'ctr1', 'sh', '-c', `echo $$ > ${pidFile}; exec sleep 60`], { stdio: 'ignore' });
    const pid = await waitFor('the exec to start', async () => Number(await readFile(pidFile, 'utf8')) || undefined, 15_000);
    assert.ok(pidExists(pid));
    child.kill('SIGKILL');
    await eventually(`pid ${pid} to die with its client`, () => !pidExists(pid), 15_000);
  });

  it('answers NOT_FOUND for an unknown container', async () => {
    const r = await crictl(['exec', 'nope', 'true']);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /NotFound|not found/);
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

async function waitForPort(port: number): Promise<void> {
  const accepts = () =>
    new Promise<boolean>((resolve) => {
      const c = net.connect(port, '127.0.0.1');
      c.once('connect', () => {
        c.destroy();
        resolve(true);
      });
      c.once('error', () => resolve(false));
    });
  await eventually(`port ${port} to accept connections`, accepts, { timeoutMs: 15_000, intervalMs: 100 });
}

/**
 * An HTTP target that answers its first two requests only once both have arrived, so a passing
 * fetch of both proves they were in flight together; later requests are answered at once.
 */
async function pairedTarget(): Promise<{ port: number; hits: () => number; close: () => void }> {
  let hits = 0;
  const held: (() => void)[] = [];
  const server = http.createServer((req, res) => {
    hits++;
    const answer = () => res.end(`hello from ${req.url}`);
    if (hits > 2) answer();
    else if (held.push(answer) === 2) for (const a of held.splice(0)) a();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    hits: () => hits,
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

function fetchText(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    // A fresh connection per request (no keep-alive) so each one is its own forwarded stream pair.
    http
      .get(url, { agent: false }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve(body));
      })
      .on('error', reject);
  });
}
