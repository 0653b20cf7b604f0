/**
 * The client of `stove-mount-helper` (mount-helper.c, built by `make build` into dist/libexec): one
 * long-lived child process that runs mount(2), umount2(2) and network-namespace pins for this process.
 * A call costs a pipe round trip instead of a fork of the whole daemon plus util-linux's start-up.
 *
 * The helper is started on first use and again after it died (a request in flight then fails). It never
 * keeps the event loop alive on its own: only while a request waits for its answer.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Readable, Writable } from 'node:stream';

/** Where `make build` puts the helper (dist/libexec, next to dist/src). */
export const DEFAULT_MOUNT_HELPER = resolve(import.meta.dirname, '../../libexec/stove-mount-helper');

/** A failed system call in the helper, with its errno. */
export class SyscallError extends Error {
  constructor(
    readonly call: string,
    readonly errno: number,
    readonly text: string,
  ) {
    super(`${call}: ${text || `errno ${errno}`}`);
  }
}

interface Waiter {
  call: string;
  resolve: () => void;
  reject: (err: Error) => void;
}

export class MountHelper {
  private child?: ChildProcess;
  private readonly waiting = new Map<string, Waiter>();
  private nextId = 1;
  private input: Buffer = Buffer.alloc(0);

  constructor(readonly path: string) {}

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

  private call(call: string, [op, ...args]: string[]): Promise<void> {
    for (const a of args) if (a.includes('\0')) return Promise.reject(new SyscallError(call, 22, 'argument contains a NUL byte'));
    const id = String(this.nextId++);
    const body = Buffer.from([op, id, ...args].map((f) => f + '\0').join(''));
    const head = Buffer.alloc(4);
    head.writeUInt32LE(body.length);
    return new Promise<void>((resolvePromise, reject) => {
      const child = this.running();
      this.waiting.set(id, { call, resolve: resolvePromise, reject });
      (child.stdout as Readable & { ref(): void }).ref();
      (child.stdin as Writable).write(Buffer.concat([head, body]));
    });
  }

  private running(): ChildProcess {
    if (this.child) return this.child;
    const child = spawn(this.path, [], { stdio: ['pipe', 'pipe', 'ignore'] });
    this.child = child;
    child.unref();
    (child.stdin as Writable & { unref(): void }).unref();
    child.stdin!.on('error', () => {}); // its death is handled below
    child.stdout!.on('data', (chunk: Buffer) => this.onData(chunk));
    const gone = (why: string) => {
      if (this.child !== child) return;
      this.child = undefined;
      this.input = Buffer.alloc(0);
      for (const w of this.waiting.values()) w.reject(new Error(`${w.call}: ${why}`));
      this.waiting.clear();
    };
    child.once('error', (err) => gone(`cannot run ${this.path}: ${err.message}`));
    child.once('exit', (code, signal) => gone(`${this.path} exited (${code ?? signal})`));
    return child;
  }

  private onData(chunk: Buffer): void {
    this.input = this.input.length ? Buffer.concat([this.input, chunk]) : chunk;
    while (this.input.length >= 4) {
      const length = this.input.readUInt32LE(0);
      if (this.input.length < 4 + length) break;
      const [id = '', errno = '', text = ''] = this.input.subarray(4, 4 + length).toString('utf8').split('\0');
      this.input = this.input.subarray(4 + length);
      const w = this.waiting.get(id);
      if (!w) continue;
      this.waiting.delete(id);
      const e = Number(errno);
      if (e === 0) w.resolve();
      else w.reject(new SyscallError(w.call, e, text));
    }
    if (this.waiting.size === 0) (this.child?.stdout as (Readable & { unref(): void }) | undefined)?.unref();
  }
}

let shared: MountHelper | null | undefined;

/** The process's helper, or undefined when it was not built (callers then use util-linux). */
export function mountHelper(): MountHelper | undefined {
  if (shared === undefined) shared = existsSync(DEFAULT_MOUNT_HELPER) ? new MountHelper(DEFAULT_MOUNT_HELPER) : null;
  return shared ?? undefined;
}

/** Tests: use this helper binary, or none (null: util-linux), instead of the built one. */
export function setMountHelper(path: string | null): void {
  shared = path === null ? null : new MountHelper(path);
}
