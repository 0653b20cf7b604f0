/**
 * The CRI streaming backend over fakes (no root, no containers): what it hands the monitor for exec
 * and attach (process spec, terminal size, streams), how it reacts to resizes, stdin's end and a
 * client going away, the URL-time checks, and port-forward to a host-network pod over loopback.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { Duplex, PassThrough, type Readable, type Writable } from 'node:stream';
import { isKind } from '../../../src/common/errors.js';
import { silentLogger } from '../../../src/common/logger.js';
import type { ExecTarget } from '../../../src/container/service.js';
import type { ContainerStateName } from '../../../src/container/model.js';
import type { OciProcess } from '../../../src/monitor/exec-dir.js';
import type { ExecStreamOptions } from '../../../src/monitor/exec-stream.js';
import type { SessionIo } from '../../../src/monitor/attach.js';
import type { Runc } from '../../../src/runtime/runc.js';
import type { SandboxState } from '../../../src/sandbox/model.js';
import { CriStreamingBackend, streamingLookup, type StreamingBackendDeps } from '../../../src/streaming/container-backend.js';
import { ResizeQueue } from '../../../src/streaming/remotecommand.js';
import type { AttachParams, ExecParams, StreamIO } from '../../../src/streaming/backend.js';
import { eventually, waitFor } from '../../helpers/wait.js';

const RUNTIME = { binary: '/usr/bin/runc' } as unknown as Runc;

class FakeMonitor {
  execs: { id: string; proc: OciProcess; opts: ExecStreamOptions }[] = [];
  attaches: { id: string; io: SessionIo }[] = [];
  resizes: string[] = [];
  killed = 0;
  closed = 0;
  exitCode!: (code: number) => void;
  attachDone!: () => void;

  async exec(_runtime: Runc, id: string, proc: OciProcess, opts: ExecStreamOptions) {
    this.execs.push({ id, proc, opts });
    return {
      pid: 4242,
      exitCode: new Promise<number>((resolve) => (this.exitCode = resolve)),
      resize: async (w: number, h: number) => void this.resizes.push(`${w}x${h}`),
      kill: () => {
        this.killed++;
        this.exitCode(137);
      },
    };
  }

  async attach(id: string, io: SessionIo) {
    this.attaches.push({ id, io });
    return {
      done: new Promise<void>((resolve) => (this.attachDone = resolve)),
      resize: async (w: number, h: number) => void this.resizes.push(`${w}x${h}`),
      close: () => {
        this.closed++;
        this.attachDone();
      },
    };
  }
}

function target(partial: Partial<ExecTarget> = {}): ExecTarget {
  return {
    id: 'c'.repeat(64),
    runtime: RUNTIME,
    process: { args: ['sleep', '1'], env: ['PATH=/bin', 'A=1'], cwd: '/work', user: { uid: 1000, gid: 1000 }, terminal: false, consoleSize: { width: 1, height: 1 } },
    tty: false,
    stdin: false,
    stdinOnce: false,
    state: 'running',
    ...partial,
  };
}

function setup(t: ExecTarget = target(), sandbox?: { id: string; state: SandboxState; netnsPath: string }) {
  const monitor = new FakeMonitor();
  const deps: StreamingBackendDeps = {
    containers: {
      execTarget: (id) => {
        if (id !== t.id) throw new Error(`container "${id}" not found`);
        return t;
      },
      find: (id) => (id === t.id ? { id: t.id, state: t.state } : undefined),
    },
    sandboxes: { find: (id) => (sandbox && id === sandbox.id ? sandbox : undefined) },
    monitor: monitor as unknown as StreamingBackendDeps['monitor'],
    log: silentLogger,
  };
  return { monitor, backend: new CriStreamingBackend(deps), deps, target: t };
}

function io(partial: Partial<StreamIO> & { abort?: AbortController } = {}): StreamIO & { abort: AbortController } {
  const abort = partial.abort ?? new AbortController();
  return { tty: false, signal: abort.signal, ...partial, abort };
}

/** Session parameters as cri/exec.ts and cri/attach.ts hand them over; streams not named are off. */
const OFF = { tty: false, stdin: false, stdout: false, stderr: false };
const execParams = (p: Partial<ExecParams> & Pick<ExecParams, 'containerId' | 'cmd'>): ExecParams => ({ ...OFF, ...p });
const attachParams = (p: Partial<AttachParams> & Pick<AttachParams, 'containerId'>): AttachParams => ({ ...OFF, ...p });

describe('streaming: container backend', () => {
  describe('URL-time checks', () => {
    it('unknown is undefined, a stopped container or a pod that is not ready is FAILED_PRECONDITION', async () => {
      const states: Record<string, ContainerStateName> = { run: 'running', done: 'exited' };
      const pods: Record<string, SandboxState> = { up: 'ready', down: 'notready' };
      const lookup = streamingLookup({
        containers: { execTarget: () => target(), find: (id) => (states[id] ? { id: `${id}-full`, state: states[id]! } : undefined) },
        sandboxes: { find: (id) => (pods[id] ? { id: `${id}-full`, state: pods[id]!, netnsPath: '' } : undefined) },
      });
      assert.equal(await lookup.container('run'), 'run-full');
      assert.equal(await lookup.container('nope'), undefined);
      await assert.rejects(lookup.container('done'), (e) => isKind(e, 'FailedPrecondition') && /"done-full" is not running \(EXITED\)/.test((e as Error).message));
      assert.equal(await lookup.sandbox('up'), 'up-full');
      assert.equal(await lookup.sandbox('nope'), undefined);
      await assert.rejects(lookup.sandbox('down'), (e) => isKind(e, 'FailedPrecondition') && /not ready/.test((e as Error).message));
    });
  });

  describe('exec', () => {
    it('runs the container\'s process spec with new args, without the container\'s console size', async () => {
      const { backend, monitor, target: t } = setup();
      const stdout = new PassThrough();
      const stderr = new PassThrough();
      const result = backend.exec(execParams({ containerId: t.id, cmd: ['ls', '-l'] }), io({ stdout, stderr }));
      const { proc, opts } = await waitFor('the exec to start', () => monitor.execs[0]);
      assert.deepEqual(proc.args, ['ls', '-l']);
      assert.deepEqual([proc['env'], proc['cwd'], proc['user'], proc.terminal, proc['consoleSize']], [['PATH=/bin', 'A=1'], '/work', { uid: 1000, gid: 1000 }, false, undefined]);
      assert.equal(opts.stdout, stdout);
      assert.equal(opts.stderr, stderr);
      assert.equal(opts.tty, false);
      monitor.exitCode(3);
      assert.equal(await result, 3);
    });

    it('on a terminal: starts at the first size, applies later ones, never passes stderr', async () => {
      const { backend, monitor, target: t } = setup();
      const resize = new ResizeQueue();
      resize.push({ width: 101, height: 33 });
      const result = backend.exec(execParams({ containerId: t.id, cmd: ['sh'], tty: true }), io({ tty: true, resize, stdout: new PassThrough(), stderr: new PassThrough() }));
      const { proc, opts } = await waitFor('the exec to start', () => monitor.execs[0]);
      assert.deepEqual(proc['consoleSize'], { width: 101, height: 33 });
      assert.equal(proc.terminal, true);
      assert.equal(opts.stderr, undefined);
      assert.deepEqual([opts.width, opts.height], [101, 33]);
      resize.push({ width: 120, height: 40 });
      await eventually('the resize applied', () => monitor.resizes.length > 0);
      assert.deepEqual(monitor.resizes, ['120x40']);
      resize.end();
      monitor.exitCode(0);
      assert.equal(await result, 0);
    });

    it('on a terminal without a size yet: starts anyway, and the late size is applied', async () => {
      const { backend, monitor, target: t } = setup();
      const resize = new ResizeQueue();
      const result = backend.exec(execParams({ containerId: t.id, cmd: ['sh'], tty: true }), io({ tty: true, resize }));
      const started = await waitFor('the exec to start without a size', () => monitor.execs[0], 2000);
      assert.equal(started.proc['consoleSize'], undefined);
      resize.push({ width: 90, height: 20 });
      await eventually('the late size applied', () => monitor.resizes.length > 0);
      assert.deepEqual(monitor.resizes, ['90x20']);
      monitor.exitCode(0);
      await result;
    });

    it('kills the process when the client goes away', async () => {
      const { backend, monitor, target: t } = setup();
      const session = io();
      const result = backend.exec(execParams({ containerId: t.id, cmd: ['sleep', '100'] }), session);
      await waitFor('the exec to start', () => monitor.execs[0]);
      session.abort.abort();
      assert.equal(await result, 137);
      assert.equal(monitor.killed, 1);
    });

    it('a container that is not running is an error, and nothing runs', async () => {
      const { backend, monitor, target: t } = setup(target({ state: 'exited' }));
      await assert.rejects(backend.exec(execParams({ containerId: t.id, cmd: ['true'] }), io()), /is not running \(EXITED\)/);
      assert.equal(monitor.execs.length, 0);
    });
  });

  describe('attach', () => {
    it('passes input only to a container that has stdin; drains it otherwise', async () => {
      const { backend, monitor, target: t } = setup();
      const stdin = new PassThrough();
      const session = io({ stdin, stdout: new PassThrough() });
      const done = backend.attach(attachParams({ containerId: t.id, stdin: true, stdout: true }), session);
      const attached = await waitFor('the attach', () => monitor.attaches[0]);
      assert.equal(attached.io.stdin, undefined);
      assert.ok(stdin.readableFlowing, 'input is drained');
      monitor.attachDone();
      await done;
    });

    it('stdin without stdin_once: the session ends (detaching) with the client\'s input', async () => {
      const { backend, monitor, target: t } = setup(target({ stdin: true, stdinOnce: false }));
      const stdin = new PassThrough();
      const done = backend.attach(attachParams({ containerId: t.id, stdin: true, stdout: true }), io({ stdin, stdout: new PassThrough() }));
      const given = (await waitFor('the attach', () => monitor.attaches[0])).io.stdin as Readable;
      assert.equal(given, stdin);
      (given as unknown as { resume(): void }).resume();
      stdin.end('x');
      await done;
      assert.equal(monitor.closed, 1);
    });

    it('stdin_once: the session lasts until the output ends; an abort detaches', async () => {
      const { backend, monitor, target: t } = setup(target({ stdin: true, stdinOnce: true, tty: true }));
      const resize = new ResizeQueue();
      const stdin = new PassThrough();
      const session = io({ stdin, stdout: new PassThrough(), stderr: new PassThrough() as Writable, tty: true, resize });
      const done = backend.attach(attachParams({ containerId: t.id, stdin: true, stdout: true, tty: true }), session);
      assert.equal((await waitFor('the attach', () => monitor.attaches[0])).io.stderr, undefined, 'a terminal has one output');
      stdin.resume();
      stdin.end();
      // The resize goes through the same session after the input ended: it is still attached.
      resize.push({ width: 70, height: 10 });
      await eventually('the resize applied', () => monitor.resizes.length > 0);
      assert.equal(monitor.closed, 0, 'still attached after the input ended');
      assert.deepEqual(monitor.resizes, ['70x10']);
      session.abort.abort();
      await done;
      assert.equal(monitor.closed, 1);
    });
  });

  describe('port-forward', () => {
    it('into a host-network pod: relays both ways over loopback', async () => {
      const server = net.createServer((s) => s.on('data', (d) => s.end(`echo:${d}`)));
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      try {
        const port = (server.address() as net.AddressInfo).port;
        const { backend } = setup(target(), { id: 'pod1', state: 'ready', netnsPath: '' });
        // The port-forward data stream as the server hands it over: what the client sent, and a sink.
        const received: Buffer[] = [];
        const client = new Duplex({
          read() {},
          write(chunk: Buffer, _e, cb) {
            received.push(chunk);
            cb();
          },
        });
        const done = backend.portForward('pod1', port, client, new AbortController().signal);
        client.push('ping');
        await eventually('the echo', () => Buffer.concat(received).toString() === 'echo:ping');
        client.destroy();
        await done;
        assert.equal(Buffer.concat(received).toString(), 'echo:ping');
      } finally {
        server.close();
      }
    });

    it('nothing listening, unknown or not ready pods: errors that name the reason', async () => {
      const server = net.createServer();
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const port = (server.address() as net.AddressInfo).port;
      await new Promise<void>((resolve) => server.close(() => resolve()));
      const { backend } = setup(target(), { id: 'pod1', state: 'ready', netnsPath: '' });
      await assert.rejects(backend.portForward('pod1', port, new PassThrough(), new AbortController().signal), /failed to connect to localhost:\d+ of host-network pod sandbox "pod1": IPv4: .*ECONNREFUSED.*IPv6/);
      await assert.rejects(backend.portForward('nope', port, new PassThrough(), new AbortController().signal), /pod sandbox "nope" not found/);
      const down = setup(target(), { id: 'pod2', state: 'notready', netnsPath: '' });
      await assert.rejects(down.backend.portForward('pod2', port, new PassThrough(), new AbortController().signal), /not ready/);
    });
  });
});
