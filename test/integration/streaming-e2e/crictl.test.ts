/**
 * The real crictl (client-go's SPDY and WebSocket clients, as the kubelet uses them) against
 * `stove serve` with real containers: `crictl exec` with exit codes and stdin, `crictl exec -it` on a
 * pseudo-terminal (`script`) typing into `sh` with a resize, `crictl attach`, `crictl port-forward`
 * to busybox httpd, and the WebSocket transports. Skipped (with the reason printed) where crictl is
 * not installed, as on CI machines; streaming.test.ts covers the same paths without it.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import http from 'node:http';
import { ContainerState } from '../../../src/gen/runtime/v1/api.js';
import { suiteHooks } from '../../helpers/suite.js';
import { eventually, skipReason, StreamingWorld } from './world.js';

const CRICTL = process.env.CRICTL ?? '/usr/local/bin/crictl';
const SCRIPT = '/usr/bin/script';

/** A crictl process: its output so far, and its end. */
interface Crictl {
  child: ChildProcess;
  output(): string;
  done: Promise<{ code: number | null; stdout: string; stderr: string }>;
}

describe('streaming: crictl exec, attach and port-forward against stove', function () {
  this.timeout(60_000);
  const world = new StreamingWorld();
  const running = new Set<ChildProcess>();
  let pod: Awaited<ReturnType<StreamingWorld['pod']>>;
  let shell: string;
  let endpointArgs: string[];

  suiteHooks({
    what: 'crictl streaming tests',
    skipReason: () =>
      skipReason() ?? (existsSync(CRICTL) ? undefined : `${CRICTL} is not installed`) ?? (existsSync(SCRIPT) ? undefined : `${SCRIPT} is not installed`),
    setup: async () => {
      await world.start();
      const endpoint = `unix://${world.daemon.socket}`;
      endpointArgs = ['--runtime-endpoint', endpoint, '--image-endpoint', endpoint, '--timeout', '20s'];
      pod = await world.pod();
      shell = await world.run(pod, world.config('busybox', { command: ['sleep', '3600'] }));
    },
    tidy: async () => {
      for (const child of running) child.kill('SIGKILL');
      running.clear();
      await world.removeContainers(shell);
    },
    cleanup: () => world.cleanup(),
  });

  /** Starts `crictl <args>` (or `file args` when `viaFile` is given), feeding `input` when set. */
  function start(args: string[], input?: string, viaFile?: string): Crictl {
    const [file, argv] = viaFile ? [viaFile, args] : [CRICTL, [...endpointArgs, ...args]];
    const child = spawn(file, argv, { stdio: ['pipe', 'pipe', 'pipe'] });
    running.add(child);
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    child.stdin!.on('error', () => {});
    if (input !== undefined) child.stdin!.end(input);
    const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
      child.once('close', (code) => {
        running.delete(child);
        resolve({ code, stdout, stderr });
      }),
    );
    return { child, output: () => stdout + stderr, done };
  }

  async function waitOutput(c: Crictl, pattern: RegExp, timeoutMs = 10_000): Promise<string> {
    await eventually(`crictl output matching ${pattern}`, async () => pattern.test(c.output()), timeoutMs).catch(() => {
      throw new Error(`crictl never printed ${pattern}; output: ${JSON.stringify(c.output())}`);
    });
    return c.output();
  }

  it('exec: output, stdin, and the exit code of the command', async () => {
    const r = await start(['exec', '-i', shell, 'sh', '-c', 'cat; echo err >&2; exit 4'], 'typed input\n').done;
    assert.equal(r.stdout, 'typed input\n');
    assert.match(r.stderr, /^err$/m);
    assert.match(r.stderr, /command terminated with exit code 4/);
    assert.notEqual(r.code, 0);
    const ok = await start(['exec', shell, 'sh', '-c', 'echo "$((6*7))"']).done;
    assert.deepEqual([ok.code, ok.stdout], [0, '42\n']);
  });

  it('exec -it on a pseudo-terminal: typing into sh, and a resize reaching it', async () => {
    // script gives crictl a terminal of 33x101; it grows to 40x120 when the test writes to the FIFO.
    const grow = join(world.daemon.dir, `grow-${randomBytes(4).toString('hex')}`);
    execFileSync('mkfifo', [grow]);
    try {
      const inner = `stty rows 33 cols 101; (read _ < ${grow}; stty rows 40 cols 120 < /dev/tty) & exec ${CRICTL} ${endpointArgs.join(' ')} exec -it ${shell} sh`;
      const c = start(['-qec', inner, '/dev/null'], undefined, SCRIPT);
      await waitOutput(c, /[#$] /); // the shell's prompt: it reads the terminal now
      c.child.stdin!.write('stty size; echo "[$((6*7))]"\n');
      await waitOutput(c, /33 101\r\n\[42\]/);
      await writeFile(grow, 'now\n');
      // crictl passes the new size on when its terminal changes; ask until the shell sees it.
      await eventually(
        'the shell to see 40x120',
        async () => {
          c.child.stdin!.write('stty size\n');
          return waitOutput(c, /40 120\r\n/, 500).then(() => true, () => false);
        },
        15_000,
      );
      c.child.stdin!.write('exit 3\n');
      const r = await c.done;
      assert.match(r.stdout, /command terminated with exit code 3/);
    } finally {
      await rm(grow, { force: true });
    }
  });

  it('exec --transport websocket', async () => {
    const r = await start(['exec', '--transport', 'websocket', '-i', shell, 'sh', '-c', 'cat; exit 6'], 'over websocket\n').done;
    assert.equal(r.stdout, 'over websocket\n');
    assert.match(r.stderr, /command terminated with exit code 6/);
  });

  it('attach to a container printing a line a second; crictl going away leaves it running', async () => {
    const ticker = await world.run(pod, world.config('busybox', { command: ['sh', '-c', 'i=0; while true; do echo tick $i; i=$((i+1)); sleep 1; done'] }));
    const c = start(['attach', ticker]);
    await waitOutput(c, /tick \d+\n.*tick \d+\n/s);
    c.child.kill('SIGKILL'); // crictl attach ignores SIGINT and SIGTERM
    const lastSeen = Math.max(...[...(await c.done).stdout.matchAll(/tick (\d+)/g)].map((m) => Number(m[1])));
    await world.attachesEnded(ticker);
    assert.equal((await world.status(ticker)).status!.state, ContainerState.CONTAINER_RUNNING);
    assert.deepEqual(await world.sessionLeftovers(), []);
    // After the daemon ended crictl's session the container ticks on: a new attach sees newer lines.
    const again = start(['attach', ticker]);
    const newer = () => [...again.output().matchAll(/tick (\d+)\n/g)].some((m) => Number(m[1]) > lastSeen);
    await eventually(`a tick after tick ${lastSeen}`, newer, 10_000);
    again.child.kill('SIGKILL');
    await again.done;
  });

  it('attach -i to a container reading stdin: input in, its end closes the container\'s stdin', async () => {
    const reader = await world.run(
      pod,
      world.config('busybox', { command: ['sh', '-c', 'while read l; do echo "got:$l"; done; echo "stdin closed"'], stdin: true, stdinOnce: true }),
    );
    const r = await start(['attach', '-i', reader], 'one\ntwo\n').done;
    assert.equal(r.stdout, 'got:one\ngot:two\nstdin closed\n');
    assert.equal(r.code, 0);
    assert.equal((await world.waitExited(reader)).exitCode, 0);
  });

  for (const transport of ['spdy', 'websocket']) {
    it(`port-forward (${transport}) to httpd in the pod, two fetches at once`, async () => {
      const script = 'mkdir -p /tmp/w && echo hello-httpd > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w';
      const web = await world.run(pod, world.config('busybox', { command: ['sh', '-c', script] }));
      await eventually('httpd to answer', async () => (await world.exec(web, ['wget', '-qO-', 'http://127.0.0.1:8080/'])).stdout === 'hello-httpd\n', 10_000);
      const c = start(['port-forward', '--transport', transport, pod.id, '0:8080']);
      const out = await waitOutput(c, /Forwarding from 127\.0\.0\.1:(\d+) -> 8080/);
      const port = Number(/127\.0\.0\.1:(\d+)/.exec(out)![1]);
      const bodies = await Promise.all([fetchText(port), fetchText(port)]);
      assert.deepEqual(bodies, ['hello-httpd\n', 'hello-httpd\n']);
      c.child.kill('SIGKILL');
      await c.done;
      await eventually('the forwarders to exit', async () => (await world.sessionLeftovers()).length === 0);
    });
  }
});

function fetchText(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: '/', agent: false }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve(body));
      })
      .on('error', reject);
  });
}
