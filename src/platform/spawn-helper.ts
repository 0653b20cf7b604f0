/**
 * Starting processes through `stove-spawn-helper` (spawn-helper.c, built by `make build` into
 * dist/libexec): a small long-lived child that forks and execs on the daemon's behalf and relays the
 * child's pipes. `child_process.spawn` forks the daemon itself, which copies the page tables of its
 * whole heap, blocks the event loop until the child has exec'd and leaves the child to tear that copy
 * down: 2-3 ms per process, several times on every pod and container start. `spawnProcess` gives the
 * same interface either way; `child_process.spawn` is used only where a test asks for it
 * (setSpawnHelper(null)). Without the built helper the daemon does not start (daemon.ts names it).
 *
 * The helper is started on first use and again after it died (children it had started keep running,
 * but their pipes to the daemon are lost: each such process reports an error).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { internal } from '../common/errors.js';
import { EventEmitter } from 'node:events';
import { accessSync, constants as fsConstants, existsSync } from 'node:fs';
import { constants } from 'node:os';
import { Duplex, type Readable, type Writable } from 'node:stream';
import { installPath } from '../common/install-dir.js';

/** Where `make build` puts the helper. */
export const DEFAULT_SPAWN_HELPER = installPath('dist/libexec/stove-spawn-helper');

export interface SpawnProcessOptions {
  /** One entry per child fd from 0: /dev/null or a pipe to this process. */
  stdio: ('ignore' | 'pipe')[];
  cwd?: string;
  /** The child's whole environment (default: this process's). */
  env?: NodeJS.ProcessEnv;
  /** Its own session and process group (setsid), as `child_process` `detached`. */
  detached?: boolean;
}

/** What callers use of a started process: the subset of ChildProcess both implementations have. */
export interface SpawnedProcess extends EventEmitter {
  readonly pid: number | undefined;
  /** One stream per child fd, null for 'ignore'. */
  readonly stdio: readonly (Readable | Writable | null)[];
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
  kill(signal?: NodeJS.Signals | number): boolean;
  unref(): void;
  ref(): void;
}

/** Starts `file` with `args`: through the spawn helper when it is built, else `child_process.spawn`. */
export function spawnProcess(file: string, args: readonly string[], options: SpawnProcessOptions): SpawnedProcess {
  const helper = spawnHelper();
  if (helper) return helper.spawn(file, args, options);
  return spawn(file, args, { stdio: options.stdio, cwd: options.cwd, env: options.env, detached: options.detached }) as ChildProcess as unknown as SpawnedProcess;
}

/** Largest data payload per write message (the helper accepts 1 MiB messages). */
const CHUNK = 256 * 1024;
/** The helper's limits (spawn-helper.c MAX_MESSAGE, MAX_ARGS): a bigger request would make it exit. */
const MAX_MESSAGE = 1024 * 1024;
const MAX_ARGS = 4096;

/** One process started by the helper; behaves like a ChildProcess for what SpawnedProcess names. */
class HelperProcess extends EventEmitter implements SpawnedProcess {
  pid: number | undefined;
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  readonly stdio: (Duplex | null)[];
  private exited = false;
  private failed = false;
  private openStreams = 0;
  private referenced = true;

  constructor(
    private readonly helper: SpawnHelper,
    readonly id: number,
    private readonly file: string,
    private readonly args: readonly string[],
    stdio: SpawnProcessOptions['stdio'],
  ) {
    super();
    this.stdio = stdio.map((kind, fd) => (kind === 'pipe' ? this.stream(fd) : null));
  }

  get stdin(): Writable | null {
    return this.stdio[0] ?? null;
  }
  get stdout(): Readable | null {
    return this.stdio[1] ?? null;
  }
  get stderr(): Readable | null {
    return this.stdio[2] ?? null;
  }

  /** The daemon's end of child fd `fd`: readable is what the child writes, writable goes to the child. */
  private stream(fd: number): Duplex {
    this.openStreams++;
    let closedInHelper = false;
    const closeInHelper = () => {
      if (closedInHelper) return;
      closedInHelper = true;
      this.helper.send('Z', [this.id, fd]);
    };
    const stream = new Duplex({
      allowHalfOpen: false,
      read: () => {},
      write: (chunk: Buffer, _encoding, callback) => {
        for (let off = 0; off < chunk.length; off += CHUNK) this.helper.send('W', [this.id, fd], chunk.subarray(off, off + CHUNK));
        callback();
      },
      final: (callback) => {
        this.helper.send('E', [this.id, fd]);
        callback();
      },
      destroy: (err, callback) => {
        closeInHelper();
        callback(err);
      },
    });
    stream.once('close', () => {
      this.openStreams--;
      this.maybeClose();
    });
    // The child's stdin is only written to (as child_process makes it): drop what comes back, so that
    // its end of file lets the stream close.
    if (fd === 0) stream.resume();
    return stream;
  }

  kill(signal: NodeJS.Signals | number = 'SIGTERM'): boolean {
    const number = typeof signal === 'number' ? signal : constants.signals[signal];
    if (number === undefined || this.exited || this.failed) return false;
    this.helper.send('K', [this.id, number, 0]);
    return true;
  }

  unref(): void {
    if (!this.referenced) return;
    this.referenced = false;
    this.helper.release();
  }

  ref(): void {
    if (this.referenced || this.done) return;
    this.referenced = true;
    this.helper.retain();
  }

  private get done(): boolean {
    return (this.exited || this.failed) && this.openStreams === 0;
  }

  onSpawned(pid: number): void {
    this.pid = pid;
    this.emit('spawn');
  }

  onFailed(errno: number, text: string): void {
    this.fail(Object.assign(new Error(`spawn ${this.file} ${codeOf(errno)}: ${text}`), {
      errno: -errno,
      code: codeOf(errno),
      syscall: `spawn ${this.file}`,
      path: this.file,
      spawnargs: [...this.args],
    }));
  }

  /** The process cannot be followed any further (not started, or the helper died). */
  fail(err: Error): void {
    if (this.failed || this.exited) return;
    this.failed = true;
    this.emit('error', err);
    for (const s of this.stdio) s?.destroy();
    this.maybeClose();
  }

  onOutput(fd: number, data: Buffer): void {
    this.stdio[fd]?.push(data);
  }

  onEnd(fd: number): void {
    this.stdio[fd]?.push(null);
  }

  onExit(code: number, signal: number): void {
    if (this.exited) return;
    this.exited = true;
    this.exitCode = code >= 0 ? code : null;
    this.signalCode = signal > 0 ? signalName(signal) : null;
    this.emit('exit', this.exitCode, this.signalCode);
    // As child_process does: what nobody reads is drained, so that the streams (and 'close') can end.
    for (const stream of this.stdio) if (stream && stream.readableFlowing === null) stream.resume();
    this.maybeClose();
  }

  private closed = false;

  private maybeClose(): void {
    if (this.closed || !this.done) return;
    this.closed = true;
    this.helper.forget(this);
    if (this.referenced) this.helper.release();
    if (this.exited) this.emit('close', this.exitCode, this.signalCode);
  }
}

function codeOf(errno: number): string {
  return Object.entries(constants.errno).find(([, n]) => n === errno)?.[0] ?? `errno ${errno}`;
}

function signalName(signal: number): NodeJS.Signals {
  return (Object.entries(constants.signals).find(([, n]) => n === signal)?.[0] ?? 'SIGKILL') as NodeJS.Signals;
}

/** The helper process and its sessions. */
export class SpawnHelper {
  private child?: ChildProcess;
  private readonly sessions = new Map<number, HelperProcess>();
  private nextId = 1;
  private input: Buffer = Buffer.alloc(0);
  /** Sessions that keep the event loop alive. */
  private references = 0;

  constructor(readonly path: string) {}

  spawn(file: string, args: readonly string[], options: SpawnProcessOptions): HelperProcess {
    const id = this.nextId++;
    const proc = new HelperProcess(this, id, file, args, options.stdio);
    this.sessions.set(id, proc);
    this.retain();
    const env = Object.entries(options.env ?? process.env)
      .filter((e): e is [string, string] => e[1] !== undefined)
      .map(([k, v]) => `${k}=${v}`);
    const fields = [
      options.detached ? 'd' : '',
      options.cwd ?? '',
      file,
      String(args.length + 1),
      file,
      ...args,
      String(env.length),
      ...env,
      options.stdio.map((k) => (k === 'pipe' ? 'p' : 'i')).join(''),
    ];
    const bad = fields.find((f) => f.includes('\0'));
    if (bad !== undefined) {
      queueMicrotask(() => proc.onFailed(constants.errno.EINVAL, 'argument contains a NUL byte'));
      return proc;
    }
    const message = Buffer.from(fields.map((f) => f + '\0').join(''));
    // Refused here, as execve would (E2BIG): the helper exits on a message over its limits, and with it
    // every other session.
    if (message.length + 9 > MAX_MESSAGE || args.length + 1 > MAX_ARGS || env.length > MAX_ARGS) {
      const what = `${args.length + 1} arguments and ${env.length} environment variables, ${message.length} bytes`;
      queueMicrotask(() => proc.onFailed(constants.errno.E2BIG, `argument list too long (${what}; at most ${MAX_ARGS} each and ${MAX_MESSAGE} bytes)`));
      return proc;
    }
    this.send('S', [id], message);
    return proc;
  }

  /** One message to the helper (starting it if needed). */
  send(type: string, fields: number[], data?: Buffer): void {
    const body = Buffer.alloc(1 + 4 * fields.length);
    body.write(type, 0, 'latin1');
    fields.forEach((f, i) => body.writeUInt32LE(f >>> 0, 1 + 4 * i));
    const head = Buffer.alloc(4);
    head.writeUInt32LE(body.length + (data?.length ?? 0));
    const child = this.running();
    child.stdin!.write(data ? Buffer.concat([head, body, data]) : Buffer.concat([head, body]));
  }

  retain(): void {
    if (this.references++ === 0) (this.child?.stdout as (Readable & { ref(): void }) | undefined)?.ref();
  }

  release(): void {
    if (--this.references === 0) (this.child?.stdout as (Readable & { unref(): void }) | undefined)?.unref();
  }

  forget(proc: HelperProcess): void {
    this.sessions.delete(proc.id);
  }

  private running(): ChildProcess {
    if (this.child) return this.child;
    const child = spawn(this.path, [], { stdio: ['pipe', 'pipe', 'ignore'] });
    this.child = child;
    child.unref();
    (child.stdin as Writable & { unref(): void }).unref();
    if (this.references === 0) (child.stdout as Readable & { unref(): void }).unref();
    child.stdin!.on('error', () => {}); // its death is handled below
    child.stdout!.on('data', (chunk: Buffer) => this.onData(chunk));
    const gone = (why: string) => {
      if (this.child !== child) return;
      this.child = undefined;
      this.input = Buffer.alloc(0);
      const lost = [...this.sessions.values()];
      this.sessions.clear();
      for (const proc of lost) proc.fail(new Error(`${this.path} ${why}`));
    };
    child.once('error', (err) => gone(`cannot run: ${err.message}`));
    child.once('exit', (code, signal) => gone(`exited (${code ?? signal})`));
    return child;
  }

  private onData(chunk: Buffer): void {
    this.input = this.input.length ? Buffer.concat([this.input, chunk]) : chunk;
    let off = 0;
    while (this.input.length - off >= 4) {
      const length = this.input.readUInt32LE(off);
      if (this.input.length - off - 4 < length) break;
      this.dispatch(this.input.subarray(off + 4, off + 4 + length));
      off += 4 + length;
    }
    this.input = this.input.subarray(off);
  }

  private dispatch(msg: Buffer): void {
    const type = String.fromCharCode(msg[0]!);
    const proc = this.sessions.get(msg.readUInt32LE(1));
    if (!proc) return;
    switch (type) {
      case 'P':
        return proc.onSpawned(msg.readUInt32LE(5));
      case 'F':
        this.sessions.delete(proc.id);
        return proc.onFailed(msg.readUInt32LE(5), msg.subarray(9).toString('utf8'));
      case 'O':
        // A copy: the chunk's buffer is reused for the next messages.
        return proc.onOutput(msg.readUInt32LE(5), Buffer.from(msg.subarray(9)));
      case 'C':
        return proc.onEnd(msg.readUInt32LE(5));
      case 'X':
        return proc.onExit(msg.readInt32LE(5), msg.readUInt32LE(9));
    }
  }
}

let shared: SpawnHelper | null | undefined;

/**
 * The process's helper; undefined only when a test chose none (setSpawnHelper(null): spawnProcess then
 * forks). A missing binary is an error naming it, never a silent fork: the daemon checks for it at
 * start-up (helperBinariesMissing).
 */
export function spawnHelper(): SpawnHelper | undefined {
  if (shared === undefined) {
    if (!existsSync(DEFAULT_SPAWN_HELPER)) throw internal(`${DEFAULT_SPAWN_HELPER} is missing (make build builds it)`);
    shared = new SpawnHelper(DEFAULT_SPAWN_HELPER);
  }
  return shared ?? undefined;
}

/** The helper programs `make build` makes that are not there, for the daemon's start-up check. */
export function helperBinariesMissing(paths: readonly string[]): string[] {
  return paths.filter((path) => {
    try {
      accessSync(path, fsConstants.X_OK);
      return false;
    } catch {
      return true;
    }
  });
}

/** Tests: use this helper binary, or none (null: child_process.spawn), instead of the built one. */
export function setSpawnHelper(path: string | null): void {
  shared = path === null ? null : new SpawnHelper(path);
}
