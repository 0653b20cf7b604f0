/**
 * Pod network namespaces, pinned by bind-mounting the namespace onto a file under `netnsDir` (as
 * containerd's netns.NewNetNS and `ip netns add` do). The pin is a mount, not a process, so it
 * survives the daemon restarting; CNI configures the namespace before the pause container exists,
 * and the pause container then joins it by path.
 *
 * The mount helper (or `unshare --net=<file>`) makes the namespace and the bind mount in one step. It
 * works with the private mount propagation of this host's `/` (a pin in a shared mount would also be fine).
 * `pin` bind-mounts a namespace some process already has (`ip netns attach`).
 */
import { mkdir, open, readdir, realpath, statfs, unlink } from 'node:fs/promises';
import { join, resolve, sep } from 'node:path';
import { alreadyExists, internal, invalidArgument } from '../common/errors.js';
import { bindMount, isMountPoint, unmount } from '../platform/mount.js';
import { mountHelper } from '../platform/mount-helper.js';
import { commandFailure, runCommand } from '../platform/processes.js';

/** statfs(2) f_type of nsfs, the filesystem behind /proc/<pid>/ns/* and their bind mounts. */
const NSFS_MAGIC = 0x6e736673;
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/** True when `path` is a pinned namespace (an nsfs mount), false when missing or a plain file. */
export async function isNetns(path: string): Promise<boolean> {
  try {
    return (await statfs(path)).type === NSFS_MAGIC;
  } catch {
    return false;
  }
}

/**
 * A new network namespace with loopback up (as every runtime does for pods), bind-mounted on the
 * existing file `path`: by the mount helper, else `unshare` running `ip` inside the new namespace.
 * Returns why it failed, or undefined.
 */
async function newPinnedNetns(path: string): Promise<string | undefined> {
  const helper = mountHelper();
  if (helper) return helper.newNetns(path).then(() => undefined, (err: Error) => err.message);
  const r = await runCommand('unshare', { args: [`--net=${path}`, 'ip', 'link', 'set', 'lo', 'up'], timeoutMs: undefined });
  return r.exitCode === 0 ? undefined : commandFailure(r);
}

/** Creates, lists and removes pinned network namespaces in one directory. */
export class NetnsStore {
  readonly dir: string;

  constructor(dir: string) {
    this.dir = resolve(dir);
  }

  /** The pin path for a sandbox. */
  pathFor(sandboxId: string): string {
    if (!NAME.test(sandboxId)) throw invalidArgument(`invalid network namespace name ${JSON.stringify(sandboxId)}`);
    return join(this.dir, sandboxId);
  }

  /** Creates the empty file a namespace is bind-mounted on; ALREADY_EXISTS when the pin is taken. */
  private async createPinFile(path: string): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    try {
      await (await open(path, 'wx', 0o444)).close();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw alreadyExists(`network namespace ${path} already exists`);
      throw err;
    }
  }

  /** Makes a new network namespace with `lo` up, pinned at `pathFor(sandboxId)`. */
  async create(sandboxId: string): Promise<string> {
    const path = this.pathFor(sandboxId);
    await this.createPinFile(path);
    const failure = await newPinnedNetns(path);
    if (failure !== undefined || !(await isNetns(path))) {
      await this.removePin(path).catch(() => {});
      throw internal(`failed to create network namespace ${path}: ${failure ?? 'no namespace was pinned'}`);
    }
    return path;
  }

  /**
   * Pins a network namespace that already exists, e.g. `/proc/<pid>/ns/net` of a process that made its
   * own (a pod with a user namespace: its netns must be owned by that user namespace, so the pod's
   * pause process creates it), at `pathFor(sandboxId)`.
   */
  async pin(sandboxId: string, source: string): Promise<string> {
    const path = this.pathFor(sandboxId);
    if (!(await isNetns(source))) throw invalidArgument(`${source} is not a network namespace`);
    await this.createPinFile(path);
    try {
      await bindMount(source, path);
    } catch (err) {
      await this.removePin(path).catch(() => {});
      throw internal(`failed to pin network namespace ${source} at ${path}: ${(err as Error).message}`);
    }
    return path;
  }

  /** Unpins and deletes a namespace file; missing is fine. The namespace lives on while a process uses it. */
  async remove(path: string): Promise<void> {
    const abs = resolve(path);
    if (!abs.startsWith(this.dir + sep)) throw invalidArgument(`network namespace ${path} is not under ${this.dir}`);
    await this.removePin(abs);
  }

  /** Paths of every pin file in the directory (for garbage collection after a restart). */
  async list(): Promise<string[]> {
    const names = await readdir(this.dir).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return [] as string[];
      throw err;
    });
    return names.filter((n) => NAME.test(n)).map((n) => join(this.dir, n));
  }

  private async removePin(path: string): Promise<void> {
    // mountinfo lists resolved paths (/run, not /var/run).
    const real = await realpath(path).catch(() => path);
    // A pin may be stacked if something mounted twice; unmount until none is left.
    for (let i = 0; i < 4 && (await isMountPoint(real)); i++) await unmount(real);
    await unlink(real).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
  }
}
