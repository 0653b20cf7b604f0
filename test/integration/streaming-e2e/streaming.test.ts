/**
 * CRI Exec, Attach, PortForward and ExecSync against real containers in a real `stove serve`, with
 * the test's own SPDY and WebSocket clients on the URLs the daemon hands out (no crictl needed, so
 * this runs on CI): exit codes, stdin, megabytes both ways, the container's user/env/cwd, terminals
 * and resizes, a client that goes away, attach and detach, port-forward into a pod's network
 * namespace and a host-network pod, single-use tokens, ExecSync timeouts and concurrency.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';
import { ContainerState, NamespaceMode } from '../../../src/gen/runtime/v1/api.js';
import { spdyUpgrade } from '../../helpers/spdy-client.js';
import { eventually, listProcessesNamed, parseStatus, rejectsWith, StreamingWorld, streamingSuite, waitForText, type CommandSession } from './world.js';

describe('streaming: exec, attach and port-forward into real containers', function () {
  this.timeout(60_000);
  const world = new StreamingWorld();
  let pod: Awaited<ReturnType<StreamingWorld['pod']>>;
  /** A long-running busybox container in `pod`. */
  let shell: string;

  streamingSuite(world, 'streaming tests', (p, s) => {
    pod = p;
    shell = s;
  });

  describe('exec', () => {
    it('without a terminal: stdout and stderr apart, exit codes, the container\'s user, env and cwd', async () => {
      const r = await world.streamExec(shell, ['sh', '-c', 'echo out; echo err >&2; exit 3']);
      assert.deepEqual([r.stdout, r.stderr, r.exitCode], ['out\n', 'err\n', 3]);
      const ok = await world.streamExec(shell, ['true']);
      assert.deepEqual([ok.stdout, ok.stderr, ok.exitCode], ['', '', 0]);
      // Killed by a signal: 128 + 9.
      assert.equal((await world.streamExec(shell, ['sh', '-c', 'kill -9 $$'])).exitCode, 137);

      const app = await world.run(pod, world.config('app', { command: ['sleep', '3600'], envs: [{ key: 'FROM_CRI', value: 'yes' }] }));
      const who = await world.streamExec(app, ['sh', '-c', 'echo "$GREETING $FROM_CRI $(pwd) $(id -u):$(id -g)"']);
      assert.equal(who.stdout, 'hello yes /srv/app 1000:1000\n');
    });

    it('stdin, stdout and stderr are each optional', async () => {
      // stdout only: stderr output goes nowhere.
      const r = await world.streamExec(shell, ['sh', '-c', 'echo visible; echo hidden >&2'], { stderr: false });
      assert.equal(r.stdout, 'visible\n');
      // stdin and stderr without stdout.
      const url = await world.execUrl({ containerId: shell, cmd: ['sh', '-c', 'read l; echo "got $l" >&2'], stdin: true, stderr: true });
      const s = await world.openCommand(url, { stdin: true, stderr: true });
      s.stdin!.write('line\n');
      s.stdin!.end();
      assert.equal((await s.stderr!.readAll()).toString(), 'got line\n');
      assert.equal(parseStatus((await s.error.readAll()).toString()).exitCode, 0);
    });

    it('carries megabytes in and out without stalls', async () => {
      const input = randomBytes(3 * 1024 * 1024);
      const r = await world.streamExec(shell, ['cat'], { input });
      assert.equal(r.raw.length, input.length);
      assert.ok(r.raw.equals(input), 'cat returned exactly what it was given');
      const big = await world.streamExec(shell, ['sh', '-c', 'head -c 8000000 /dev/zero | tr "\\0" x; echo tail >&2']);
      assert.equal(big.raw.length, 8_000_000);
      assert.equal(big.stderr, 'tail\n');
      const digest = await world.streamExec(shell, ['sha256sum'], { input });
      assert.equal(digest.stdout.split(' ')[0], createHash('sha256').update(input).digest('hex'));
    });

    it('on a terminal: the first size before the process starts, resizes, typed input, exit code', async () => {
      const url = await world.execUrl({ containerId: shell, cmd: ['sh'], tty: true, stdin: true, stdout: true });
      const s = await world.openCommand(url, { stdin: true, stdout: true, tty: true });
      s.resize!.write('{"Width":101,"Height":33}\n');
      s.stdin!.write('stty size; echo "[$((6*7))]"\n');
      await waitForText(s.stdout!, /33 101\r\n/);
      await waitForText(s.stdout!, '[42]');
      s.resize!.write('{"Width":120,"Height":40}\n');
      await waitForSize(s, 40, 120);
      s.stdin!.write('exit 5\n');
      assert.equal(parseStatus((await s.error.readAll()).toString()).exitCode, 5);
      // Started on a terminal of the client's size, not resized after the fact.
      const first = await world.execUrl({ containerId: shell, cmd: ['stty', 'size'], tty: true, stdin: true, stdout: true });
      const f = await world.openCommand(first, { stdin: true, stdout: true, tty: true });
      f.resize!.write('{"Width":77,"Height":22}\n');
      assert.equal((await f.stdout!.readAll()).toString(), '22 77\r\n');
    });

    it('kills the process when the client goes away', async () => {
      const url = await world.execUrl({ containerId: shell, cmd: ['sh', '-c', 'echo started; exec sleep 4242'], stdout: true, stderr: true });
      const s = await world.openCommand(url, { stdout: true, stderr: true });
      await waitForText(s.stdout!, 'started');
      assert.match((await world.exec(shell, ['ps', '-o', 'args'])).stdout, /sleep 4242/);
      s.client.close();
      await eventually('the exec to be killed', async () => !(await world.exec(shell, ['ps', '-o', 'args'])).stdout.includes('sleep 4242'));
    });

    it('a command that cannot run is an error on the error stream', async () => {
      const r = await world.streamExec(shell, ['/no/such/binary']);
      // runc: "… no such file or directory"; crun: "executable file `…` not found in $PATH: No such file or directory".
      assert.match(r.failure ?? '', /error executing command in container: .*no such file or directory/i);
    });

    it('over WebSocket (v5.channel.k8s.io): stdin with CLOSE, stdout, stderr, exit code', async () => {
      const url = await world.execUrl({ containerId: shell, cmd: ['sh', '-c', 'cat; echo done >&2; exit 2'], stdin: true, stdout: true, stderr: true });
      const s = await world.websocket(url, ['v5.channel.k8s.io']);
      assert.equal(s.ws.protocol, 'v5.channel.k8s.io');
      s.ws.send(Buffer.concat([Buffer.from([0]), Buffer.from('over websocket\n')]));
      s.ws.send(Buffer.from([255, 0]));
      assert.equal(await s.closed, 1000);
      const channel = (n: number) => Buffer.concat(s.messages.filter((m) => m[0] === n).map((m) => m.subarray(1))).toString();
      assert.equal(channel(1), 'over websocket\n');
      assert.equal(channel(2), 'done\n');
      assert.equal(parseStatus(channel(3)).exitCode, 2);
    });

    it('URLs are single-use; unknown, exited and bad requests are refused with clear errors', async () => {
      const url = await world.execUrl({ containerId: shell, cmd: ['true'], stdout: true });
      const s = await world.openCommand(url, { stdout: true });
      assert.equal(parseStatus((await s.error.readAll()).toString()).exitCode, 0);
      const again = await spdyUpgrade(url, ['v4.channel.k8s.io']);
      assert.equal(again.status, 404);

      const rt = world.daemon.clients.runtime;
      await rejectsWith(rt.exec({ containerId: 'f'.repeat(64), cmd: ['true'], stdout: true, stdin: false, stderr: false, tty: false }), 'NOT_FOUND', /not found/);
      await rejectsWith(rt.exec({ containerId: shell, cmd: [], stdout: true, stdin: false, stderr: false, tty: false }), 'INVALID_ARGUMENT', /cmd/);
      await rejectsWith(rt.attach({ containerId: shell, stdout: false, stdin: false, stderr: false, tty: false }), 'INVALID_ARGUMENT', /one of stdin, stdout, or stderr/);
      await rejectsWith(rt.portForward({ podSandboxId: 'f'.repeat(64), port: [80] }), 'NOT_FOUND', /not found/);
      const done = await world.run(pod, world.config('busybox', { command: ['true'] }));
      await world.waitExited(done);
      await rejectsWith(rt.exec({ containerId: done, cmd: ['true'], stdout: true, stdin: false, stderr: false, tty: false }), 'FAILED_PRECONDITION', /is not running \(EXITED\)/);
      await rejectsWith(rt.attach({ containerId: done, stdout: true, stdin: false, stderr: false, tty: false }), 'FAILED_PRECONDITION', /is not running/);
      await rejectsWith(rt.execSync({ containerId: done, cmd: ['true'], timeout: 0n }), 'FAILED_PRECONDITION', /not running/);
    });
  });

  describe('attach', () => {
    it('to a container printing a line a second; detaching leaves it running', async () => {
      const ticker = await world.run(pod, world.config('busybox', { command: ['sh', '-c', 'i=0; while true; do echo tick $i; echo tock $i >&2; i=$((i+1)); sleep 1; done'] }));
      const url = await world.attachUrl({ containerId: ticker, stdout: true, stderr: true });
      const s = await world.openCommand(url, { stdout: true, stderr: true });
      const seen = await waitForText(s.stdout!, /tick (\d+)\n.*tick \d+\n/s, 5000);
      await waitForText(s.stderr!, /tock \d+\n/);
      const firstSeen = Number(/tick (\d+)/.exec(seen)![1]);
      s.client.close();
      await world.attachesEnded(ticker);
      assert.equal((await world.status(ticker)).status!.state, ContainerState.CONTAINER_RUNNING);
      // A second attach, after the daemon ended the first, sees newer lines only: the container ticks on,
      // and output is live, not replayed.
      const again = await world.openCommand(await world.attachUrl({ containerId: ticker, stdout: true }), { stdout: true });
      const later = await waitForText(again.stdout!, /tick (\d+)\n/, 5000);
      assert.ok(Number(/tick (\d+)/.exec(later)![1]) > firstSeen + 1, later);
    });

    it('to a container reading stdin (stdin_once): input arrives, its end closes the container\'s stdin', async () => {
      const reader = await world.run(
        pod,
        world.config('busybox', { command: ['sh', '-c', 'while read l; do echo "got:$l"; done; echo "stdin closed"; exit 4'], stdin: true, stdinOnce: true }),
      );
      const url = await world.attachUrl({ containerId: reader, stdin: true, stdout: true, stderr: true });
      const s = await world.openCommand(url, { stdin: true, stdout: true, stderr: true });
      s.stdin!.write('one\n');
      await waitForText(s.stdout!, 'got:one\n');
      s.stdin!.write('two\n');
      s.stdin!.end();
      assert.equal((await s.stdout!.readAll()).toString(), 'got:one\ngot:two\nstdin closed\n');
      assert.equal(parseStatus((await s.error.readAll()).toString()).exitCode, 0);
      assert.equal((await world.waitExited(reader)).exitCode, 4);
    });

    it('to a container that keeps stdin open: each attach ends with its input, the container runs on', async () => {
      const reader = await world.run(pod, world.config('busybox', { command: ['sh', '-c', 'while read l; do echo "got:$l"; done'], stdin: true, stdinOnce: false }));
      for (const word of ['first', 'second']) {
        const s = await world.openCommand(await world.attachUrl({ containerId: reader, stdin: true, stdout: true }), { stdin: true, stdout: true });
        s.stdin!.write(`${word}\n`);
        await waitForText(s.stdout!, `got:${word}\n`);
        s.stdin!.end();
        assert.equal(parseStatus((await s.error.readAll()).toString()).exitCode, 0);
      }
      assert.equal((await world.status(reader)).status!.state, ContainerState.CONTAINER_RUNNING);
    });

    it('to a terminal container: typed input, resize, and detach', async () => {
      const term = await world.run(pod, world.config('busybox', { command: ['sh'], tty: true, stdin: true }));
      const url = await world.attachUrl({ containerId: term, stdin: true, stdout: true, tty: true });
      const s = await world.openCommand(url, { stdin: true, stdout: true, tty: true });
      s.resize!.write('{"Width":91,"Height":27}\n');
      await waitForSize(s, 27, 91);
      s.client.close();
      await world.attachesEnded(term);
      // After the daemon ended the session, the shell still answers a new attach.
      const again = await world.openCommand(await world.attachUrl({ containerId: term, stdin: true, stdout: true, tty: true }), { stdin: true, stdout: true, tty: true });
      again.stdin!.write('echo "still-$((40+2))"\n');
      await waitForText(again.stdout!, 'still-42');
      assert.equal((await world.status(term)).status!.state, ContainerState.CONTAINER_RUNNING);
    });
  });

  describe('port-forward', () => {
    /** A pod running busybox httpd on 8080 (page-a) and 8081 (page-b). */
    async function httpdPod(p = pod): Promise<string> {
      const script = [
        'mkdir -p /tmp/a /tmp/b',
        'echo page-a > /tmp/a/index.html',
        'echo page-b > /tmp/b/index.html',
        'httpd -p 8080 -h /tmp/a',
        'exec httpd -f -p 8081 -h /tmp/b',
      ].join(' && ');
      const id = await world.run(p, world.config('busybox', { command: ['sh', '-c', script] }));
      await eventually('httpd to answer', async () => (await world.exec(id, ['wget', '-qO-', 'http://127.0.0.1:8081/'])).stdout === 'page-b\n', 10_000);
      return id;
    }

    /** One forwarded connection: sends `request`, half-closes, returns the reply and the error stream. */
    async function forward(client: Awaited<ReturnType<StreamingWorld['connect']>>, port: number, requestId: string, request: string) {
      const error = await client.open({ streamtype: 'error', port: String(port), requestid: requestId });
      error.end();
      const data = await client.open({ streamtype: 'data', port: String(port), requestid: requestId });
      data.write(request);
      data.end();
      const [reply, err] = await Promise.all([data.readAll(), error.readAll()]);
      return { reply: reply.toString(), error: err.toString() };
    }

    it('fetches from httpd in the pod: concurrent connections and two ports on one session', async () => {
      await httpdPod();
      const client = await world.connect(await world.portForwardUrl(pod.id), ['portforward.k8s.io']);
      const get = 'GET /index.html HTTP/1.0\r\n\r\n';
      const results = await Promise.all([forward(client, 8080, '1', get), forward(client, 8080, '2', get), forward(client, 8081, '3', get)]);
      assert.match(results[0]!.reply, /^HTTP\/1\.[01] 200 OK\r\n[\s\S]*\r\n\r\npage-a\n$/);
      assert.match(results[1]!.reply, /page-a\n$/);
      assert.match(results[2]!.reply, /page-b\n$/);
      for (const r of results) assert.equal(r.error, '');
      // The session stays usable after its connections ended.
      assert.match((await forward(client, 8081, '4', get)).reply, /page-b\n$/);
    });

    it('nothing listening: the error stream says so, and the session goes on', async () => {
      await httpdPod();
      const client = await world.connect(await world.portForwardUrl(pod.id), ['portforward.k8s.io']);
      const refused = await forward(client, 9, '1', 'x');
      const error = JSON.parse(refused.error) as { message: string; closeConnection: boolean };
      assert.match(error.message, /failed to connect to localhost:9 inside the network namespace of pod sandbox .*connection refused/);
      assert.equal(refused.reply, '');
    });

    it('into a host-network pod: dials the host\'s loopback', async () => {
      const server = net.createServer((socket) => socket.on('data', (d) => socket.write(`echo:${d}`)).on('end', () => socket.end()));
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      try {
        const port = (server.address() as net.AddressInfo).port;
        const hostPod = await world.pod({ linux: { securityContext: { namespaceOptions: { network: NamespaceMode.NODE } } } });
        const client = await world.connect(await world.portForwardUrl(hostPod.id), ['portforward.k8s.io']);
        assert.equal((await forward(client, port, '1', 'ping')).reply, 'echo:ping');
        client.close();
        await world.daemon.clients.runtime.removePodSandbox({ podSandboxId: hostPod.id });
      } finally {
        server.close();
      }
    });
  });

  describe('ExecSync', () => {
    it('a timed-out command is dead (not even a zombie) when DEADLINE_EXCEEDED returns', async () => {
      // As critest: a pod of its own whose PID namespace the pause process owns, a `top` container.
      const own = await world.pod();
      const top = await world.run(own, world.config('busybox', { command: ['top'] }));
      for (let i = 0; i < 3; i++) {
        await rejectsWith(world.daemon.clients.runtime.execSync({ containerId: top, cmd: ['sleep', '4321'], timeout: 1n }), 'DEADLINE_EXCEEDED', /timed out after 1s/);
        const left = await world.exec(top, listProcessesNamed('sleep'));
        assert.equal(left.stdout, '', `after timeout ${i + 1}`);
      }
      await world.daemon.clients.runtime.removePodSandbox({ podSandboxId: own.id });
    });

    it('runs 20 at once, each with its own output and exit code', async () => {
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) => world.exec(shell, ['sh', '-c', `echo n${i}; echo e${i} >&2; exit ${i}`], 30n)),
      );
      results.forEach((r, i) => assert.deepEqual([r.stdout, r.stderr, r.exitCode], [`n${i}\n`, `e${i}\n`, i]));
    });
  });

  describe('daemon stop', () => {
    it('ends live sessions: the exec\'d process is killed, the container runs on', async () => {
      const url = await world.execUrl({ containerId: shell, cmd: ['sh', '-c', 'echo started; exec sleep 4343'], stdout: true });
      const s = await world.openCommand(url, { stdout: true });
      await waitForText(s.stdout!, 'started');
      await world.pods.restart('SIGTERM');
      await s.client.waitClosed();
      assert.equal((await world.status(shell)).status!.state, ContainerState.CONTAINER_RUNNING);
      await eventually('the exec to be killed', async () => !(await world.exec(shell, ['ps', '-o', 'args'])).stdout.includes('sleep 4343'));
    });
  });

  describe('afterwards', () => {
    it('leaves nothing behind once the pods are removed', async () => {
      world.closeClients();
      await world.removeAll();
      assert.deepEqual(await world.leftovers(), []);
      assert.deepEqual(await world.sessionLeftovers(), []);
    });
  });
});

/** Asks the shell for its size until it reports `rows cols`: a resize reaches the terminal asynchronously. */
async function waitForSize(s: CommandSession, rows: number, cols: number): Promise<void> {
  const size = new RegExp(`${rows} ${cols}\\r\\n`);
  await eventually(
    `the terminal at ${rows}x${cols}`,
    async () => {
      s.stdin!.write('stty size\n');
      return waitForText(s.stdout!, size, 300).then(() => true, () => false);
    },
    10_000,
  );
}
