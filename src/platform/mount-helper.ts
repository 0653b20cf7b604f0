/**
 * The client of `stove-mount-helper` (mount-helper.c, built by `make build` into dist/libexec): one
 * long-lived child process that runs mount(2), umount2(2), mknod(2), idmapped bind mounts and
 * network-namespace pins for this process.
 * A call costs a pipe round trip instead of a fork of the whole daemon plus util-linux's start-up.
 *
 * Helpers are started on first use and again after one died (a request in flight then fails). Each
 * handles its requests in order, so a request goes to an idle helper (up to four run at once) and one
 * without an answer within the timeout fails and gets its helper killed: a mount hung in the kernel
 * (an unreachable NFS server, a dead FUSE daemon) never holds up every other mount. A helper never
 * keeps the event loop alive on its own: only while a request waits for its answer.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { Readable, Writable } from 'node:stream';
import { installPath } from '../common/install-dir.js';
import { StoveError, internal } from '../common/errors.js';

/** Where `make build` puts the helper. */
export const DEFAULT_MOUNT_HELPER = installPath('dist/libexec/stove-mount-helper');

/** A failed system call in the helper, with its errno. */
export class SyscallError extends StoveError {
  constructor(
    readonly call: string,
    readonly errno: number,
    readonly text: string,
  ) {
    super('Internal', `${call}: ${text || `errno ${errno}`}`);
  }
}

interface Waiter {
  call: string;
  resolve: () => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

/** One helper process and the requests it has not answered yet (it answers them in order). */
interface HelperProcess {
  child: ChildProcess;
  waiting: Map<string, Waiter>;
  input: Buffer;
}

/** A request with no answer for this long is failed, and its helper replaced (a hung NFS or FUSE mount). */
export const DEFAULT_MOUNT_TIMEOUT_MS = 60_000;
/** Helpers at most: a request goes to an idle one, so one hung request does not hold up the others. */
export const MAX_MOUNT_HELPERS = 4;
const ETIMEDOUT = 110;

export class MountHelper {
  private readonly helpers: HelperProcess[] = [];
  private nextId = 1;

  constructor(
    readonly path: string,
    readonly timeoutMs = DEFAULT_MOUNT_TIMEOUT_MS,
  ) {}

  /** mount(2) in `cwd` (default `/`); `data` '' passes NULL. */
  mount(source: string, target: string, fstype: string, flags: number, data: string, cwd = ''): Promise<void> {
    return this.call('mount', ['M', source, target, fstype, String(flags), data, cwd]);
  }

  /** umount2(2). */
  umount(target: string, flags: number): Promise<void> {
    return this.call('umount', ['U', target, String(flags)]);
  }

  /** A new network namespace with `lo` up, bind-mounted on `path` (an existing file). */
  newNetns(path: string): Promise<void> {
    return this.call('netns', ['N', path]);
  }

  /** mknod(2) of a char (c) or block (b) device or a fifo (p) with exactly `mode` (umask 0). */
  mknod(path: string, type: 'c' | 'b' | 'p', mode: number, major: number, minor: number): Promise<void> {
    return this.call('mknod', ['D', path, type, mode.toString(8), String(major), String(minor)]);
  }

  /**
   * Idmapped bind mounts: each of `sources` (relative to `cwd`) cloned, idmapped with a user namespace of
   * these maps (`uid_map`/`gid_map` lines, `inside outside count`) and attached on the target of the same
   * index (an existing dir). All or nothing: a failure detaches what was attached.
   */
  idmapMounts(uidMap: string, gidMap: string, cwd: string, sources: string[], targets: string[]): Promise<void> {
    if (sources.length !== targets.length || sources.length === 0) return Promise.reject(new SyscallError('idmap mount', 22, 'as many sources as targets, at least one'));
    for (const p of [...sources, ...targets]) if (p.includes('\n') || p === '') return Promise.reject(new SyscallError('idmap mount', 22, `path ${JSON.stringify(p)} is empty or holds a newline`));
    return this.call('idmap mount', ['I', uidMap, gidMap, cwd, sources.join('\n'), targets.join('\n')]);
  }

  /** Helper processes running now (for tests and diagnostics). */
  get processes(): number {
    return this.helpers.length;
  }

  private call(call: string, [op, ...args]: string[]): Promise<void> {
    for (const a of args) if (a.includes('\0')) return Promise.reject(new SyscallError(call, 22, 'argument contains a NUL byte'));
    const id = String(this.nextId++);
    const body = Buffer.from([op, id, ...args].map((f) => f + '\0').join(''));
    const head = Buffer.alloc(4);
    head.writeUInt32LE(body.length);
    return new Promise<void>((resolvePromise, reject) => {
      const helper = this.pick();
      const timer = setTimeout(() => this.timedOut(helper, id), this.timeoutMs);
      timer.unref();
      helper.waiting.set(id, { call, resolve: resolvePromise, reject, timer });
      (helper.child.stdout as Readable & { ref(): void }).ref();
      (helper.child.stdin as Writable).write(Buffer.concat([head, body]));
    });
  }

  /** An idle helper, else a new one (up to MAX_MOUNT_HELPERS), else the least busy. */
  private pick(): HelperProcess {
    const idle = this.helpers.find((h) => h.waiting.size === 0);
    if (idle) return idle;
    if (this.helpers.length < MAX_MOUNT_HELPERS) return this.start();
    return this.helpers.reduce((a, b) => (b.waiting.size < a.waiting.size ? b : a));
  }

  /**
   * A request the helper did not answer in time: it fails, and the helper is killed (it is stuck in
   * the kernel; SIGKILL lands when the call returns). Requests queued behind it on that helper fail
   * too: none of them ran, and whether the stuck one will is unknown.
   */
  private timedOut(helper: HelperProcess, id: string): void {
    const w = helper.waiting.get(id);
    if (!w) return;
    helper.waiting.delete(id);
    w.reject(new SyscallError(w.call, ETIMEDOUT, `no answer from ${this.path} within ${this.timeoutMs / 1000}s; the helper was replaced`));
    this.retire(helper, `${this.path} was replaced after a request hung`);
    helper.child.kill('SIGKILL');
  }

  /** Forgets a helper and fails what it still owed. */
  private retire(helper: HelperProcess, why: string): void {
    const i = this.helpers.indexOf(helper);
    if (i < 0) return;
    this.helpers.splice(i, 1);
    for (const w of helper.waiting.values()) {
      clearTimeout(w.timer);
      w.reject(new Error(`${w.call}: ${why}`));
    }
    helper.waiting.clear();
  }

  private start(): HelperProcess {
    const child = spawn(this.path, [], { stdio: ['pipe', 'pipe', 'ignore'] });
    const helper: HelperProcess = { child, waiting: new Map(), input: Buffer.alloc(0) };
    this.helpers.push(helper);
    child.unref();
    (child.stdin as Writable & { unref(): void }).unref();
    child.stdin!.on('error', () => {}); // its death is handled below
    child.stdout!.on('data', (chunk: Buffer) => this.onData(helper, chunk));
    child.once('error', (err) => this.retire(helper, `cannot run ${this.path}: ${err.message}`));
    child.once('exit', (code, signal) => this.retire(helper, `${this.path} exited (${code ?? signal})`));
    return helper;
  }

  private onData(helper: HelperProcess, chunk: Buffer): void {
    helper.input = helper.input.length ? Buffer.concat([helper.input, chunk]) : chunk;
    while (helper.input.length >= 4) {
      const length = helper.input.readUInt32LE(0);
      if (helper.input.length < 4 + length) break;
      const [id = '', errno = '', text = ''] = helper.input.subarray(4, 4 + length).toString('utf8').split('\0');
      helper.input = helper.input.subarray(4 + length);
      const w = helper.waiting.get(id);
      if (!w) continue;
      helper.waiting.delete(id);
      clearTimeout(w.timer);
      const e = Number(errno);
      if (e === 0) w.resolve();
      else w.reject(new SyscallError(w.call, e, text));
    }
    if (helper.waiting.size === 0) (helper.child.stdout as Readable & { unref(): void }).unref();
  }
}

let shared: MountHelper | null | undefined;

/**
 * The process's helper; undefined only when a test chose none (setMountHelper(null): callers then use
 * util-linux). A missing binary is an error naming it, never a silent fallback: the daemon checks for
 * it at start-up.
 */
export function mountHelper(): MountHelper | undefined {
  if (shared === undefined) {
    if (!existsSync(DEFAULT_MOUNT_HELPER)) throw internal(`${DEFAULT_MOUNT_HELPER} is missing (make build builds it)`);
    shared = new MountHelper(DEFAULT_MOUNT_HELPER);
  }
  return shared ?? undefined;
}

/** Tests: use this helper binary, or none (null: util-linux), instead of the built one. */
export function setMountHelper(path: string | null): void {
  shared = path === null ? null : new MountHelper(path);
}
