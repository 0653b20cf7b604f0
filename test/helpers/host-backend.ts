/**
 * A StreamingBackend that runs everything on the host, for testing the streaming protocols before (and
 * independently of) containers: exec runs `cmd` as a host process (under `script` for a TTY, which gives
 * it a pseudo-terminal), attach connects to "containers" the test started with `startContainer`,
 * port-forward dials 127.0.0.1:<port>. It records what it saw (sizes, aborts) for assertions.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import { constants } from 'node:os';
import type { Duplex } from 'node:stream';
import type { AttachParams, ExecParams, StreamingBackend, StreamingLookup, StreamIO, TerminalSize } from '../../src/streaming/backend.js';
import { relay } from '../../src/streaming/relay.js';

export interface HostContainer {
  id: string;
  process: ChildProcess;
  stdin: boolean;
  stdinOnce: boolean;
  tty: boolean;
}

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

export class HostBackend implements StreamingBackend, StreamingLookup {
  readonly containers = new Map<string, HostContainer>();
  readonly pods = new Set<string>(['pod1']);
  /** Sizes received per exec/attach, in order. */
  readonly resizes: TerminalSize[] = [];
  readonly aborted: string[] = [];
  readonly execs: ExecParams[] = [];
  /** Containers exec may target (any id when empty). */
  readonly execTargets = new Set<string>(['ctr1']);
  private readonly children = new Set<ChildProcess>();

  async container(id: string): Promise<string | undefined> {
    if (this.containers.has(id) || this.execTargets.has(id)) return id;
    return undefined;
  }

  async sandbox(id: string): Promise<string | undefined> {
    return this.pods.has(id) ? id : undefined;
  }

  private watchResize(io: StreamIO): void {
    if (!io.resize) return;
    void (async () => {
      for await (const size of io.resize!) this.resizes.push(size);
    })();
  }

  exec(params: ExecParams, io: StreamIO): Promise<number> {
    this.execs.push(params);
    this.watchResize(io);
    const [file, args] = io.tty
      ? ['script', ['-qfec', params.cmd.map(quote).join(' '), '/dev/null']]
      : [params.cmd[0]!, params.cmd.slice(1)];
    const child = spawn(file, args, { stdio: [io.stdin ? 'pipe' : 'ignore', io.stdout ? 'pipe' : 'ignore', io.stderr ? 'pipe' : 'ignore'] });
    this.children.add(child);
    if (io.stdin && child.stdin) {
      child.stdin.on('error', () => {});
      io.stdin.pipe(child.stdin);
    }
    if (io.stdout && child.stdout) child.stdout.pipe(io.stdout, { end: false });
    if (io.stderr && child.stderr) child.stderr.pipe(io.stderr, { end: false });
    const onAbort = () => {
      this.aborted.push(params.cmd.join(' '));
      child.kill('SIGKILL');
    };
    io.signal.addEventListener('abort', onAbort, { once: true });
    return new Promise((resolve, reject) => {
      child.once('error', reject);
      // 'close': the process exited and its output pipes are drained into io.
      child.once('close', (code, signal) => {
        this.children.delete(child);
        io.signal.removeEventListener('abort', onAbort);
        resolve(code ?? 128 + ((constants.signals as Record<string, number>)[signal ?? 'SIGKILL'] ?? 9));
      });
    });
  }

  /** Starts a host process standing in for a container's main process. */
  startContainer(id: string, command: string, opts: { stdin?: boolean; stdinOnce?: boolean; tty?: boolean } = {}): HostContainer {
    const child = spawn('sh', ['-c', command], { stdio: ['pipe', 'pipe', 'pipe'] });
    child.stdin!.on('error', () => {});
    this.children.add(child);
    child.once('close', () => this.children.delete(child));
    const c = { id, process: child, stdin: opts.stdin ?? true, stdinOnce: opts.stdinOnce ?? false, tty: opts.tty ?? false };
    this.containers.set(id, c);
    return c;
  }

  attach(params: AttachParams, io: StreamIO): Promise<void> {
    const c = this.containers.get(params.containerId);
    if (!c) return Promise.reject(new Error(`container ${params.containerId} not found`));
    this.watchResize(io);
    const child = c.process;
    return new Promise((resolve) => {
      const cleanups: (() => void)[] = [];
      let done = false;
      const finish = () => {
        if (done) return;
        done = true;
        for (const f of cleanups) f();
        resolve();
      };
      if (io.stdin && c.stdin) {
        const onData = (d: Buffer) => child.stdin!.write(d);
        const onEnd = () => {
          // stdin_once: the container's stdin closes with the first attach's stdin.
          if (c.stdinOnce) child.stdin!.end();
          else if (!c.tty) finish();
        };
        io.stdin.on('data', onData);
        io.stdin.on('end', onEnd);
        cleanups.push(() => {
          io.stdin!.off('data', onData);
          io.stdin!.off('end', onEnd);
        });
      }
      const out = (d: Buffer) => io.stdout?.write(d);
      const err = (d: Buffer) => (io.stderr ?? (c.tty ? io.stdout : undefined))?.write(d);
      child.stdout!.on('data', out);
      child.stderr!.on('data', err);
      cleanups.push(() => {
        child.stdout!.off('data', out);
        child.stderr!.off('data', err);
      });
      if (child.exitCode !== null || child.signalCode !== null) return finish();
      child.once('close', finish);
      cleanups.push(() => child.off('close', finish));
      io.signal.addEventListener('abort', () => {
        this.aborted.push(`attach ${c.id}`);
        finish();
      });
    });
  }

  portForward(_pod: string, port: number, stream: Duplex, signal: AbortSignal): Promise<void> {
    return forwardToLoopback(port, stream, signal);
  }

  /** Kills every process this backend started. */
  killAll(): void {
    for (const c of this.children) c.kill('SIGKILL');
  }
}

/** Relays `stream` to a connection to `port` on 127.0.0.1 (a connect error rejects) until either side ends. */
export function forwardToLoopback(port: number, stream: Duplex, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const conn = net.connect(port, '127.0.0.1');
    conn.once('error', reject);
    conn.once('connect', () => {
      conn.off('error', reject);
      relay(stream, conn, signal).then(resolve, reject);
    });
  });
}
