/**
 * Mounting and unmounting (Node has no mount(2) binding): through the daemon's mount helper
 * (mount-helper.ts), or util-linux `mount`/`umount` when the helper is not built or an option needs
 * util-linux. Every caller that mounts something goes through here, so failures read the same everywhere.
 */
import { readFile } from 'node:fs/promises';
import { internal } from '../common/errors.js';
import { mountHelper, SyscallError } from './mount-helper.js';
import { commandFailure, runCommand } from './processes.js';

export interface MountRequest {
  type: string;
  source: string;
  target: string;
  /** `-o` options, e.g. ['bind', 'ro'] or overlay's lowerdir=…. */
  options?: string[];
  /** Run `mount` in this directory (overlay lowerdir strings relative to it stay short). */
  cwd?: string;
}

/** mount(2) flags of util-linux option words (linux/mount.h); `true` clears the flag. */
const FLAG_OPTIONS: Record<string, [number, boolean?]> = {
  ro: [0x1], rw: [0x1, true],
  nosuid: [0x2], suid: [0x2, true],
  nodev: [0x4], dev: [0x4, true],
  noexec: [0x8], exec: [0x8, true],
  sync: [0x10], async: [0x10, true],
  dirsync: [0x80],
  noatime: [0x400], atime: [0x400, true],
  nodiratime: [0x800], diratime: [0x800, true],
  bind: [0x1000], rbind: [0x1000 | 0x4000],
  silent: [0x8000], loud: [0x8000, true],
  relatime: [0x200000], norelatime: [0x200000, true],
  strictatime: [0x1000000], nostrictatime: [0x1000000, true],
  lazytime: [0x2000000], nolazytime: [0x2000000, true],
  defaults: [0],
};
const MNT_DETACH = 2;
const ENOENT = 2;
const EINVAL = 22;
/**
 * Left to util-linux: propagation changes are a mount(2) call of their own, and a remount keeps the
 * flags the mount has (libmount reads them from mountinfo).
 */
const UTIL_LINUX_ONLY = /^(r?(shared|slave|private|unbindable)|remount)$/;

/** flags and the filesystem's data string for `mount -o <options>`; undefined if util-linux must do it. */
export function mountFlags(options: string[]): { flags: number; data: string } | undefined {
  let flags = 0;
  const data: string[] = [];
  for (const option of options) {
    if (UTIL_LINUX_ONLY.test(option)) return undefined;
    const known = FLAG_OPTIONS[option];
    if (!known) data.push(option);
    else if (known[1]) flags &= ~known[0];
    else flags |= known[0];
  }
  return { flags, data: data.join(',') };
}

/** Mounts; throws an Internal error quoting the system's (or mount's) own message. */
export async function mount(req: MountRequest): Promise<void> {
  const helper = mountHelper();
  const parsed = helper && mountFlags(req.options ?? []);
  if (helper && parsed) {
    try {
      await helper.mount(req.source, req.target, req.type, parsed.flags, parsed.data, req.cwd);
    } catch (err) {
      throw internal(`mount ${req.type} on ${req.target} failed: ${(err as Error).message}`, err);
    }
    return;
  }
  const args = ['-t', req.type];
  if (req.options?.length) args.push('-o', req.options.join(','));
  args.push(req.source, req.target);
  const r = await runCommand('mount', { args, cwd: req.cwd, timeoutMs: undefined });
  if (r.exitCode !== 0) throw internal(`mount ${req.type} on ${req.target} failed: ${commandFailure(r)}`);
}

/** Bind-mounts `source` on `target` (optionally read-only, which needs a remount on older kernels). */
export async function bindMount(source: string, target: string, readOnly = false): Promise<void> {
  await mount({ type: 'none', source, target, options: ['bind'] });
  if (readOnly) await mount({ type: 'none', source: 'none', target, options: ['remount', 'bind', 'ro'] });
}

/** One range of an id map (`inside outside count`, as /proc/<pid>/uid_map reads). */
export interface IdMapRange {
  containerId: number;
  hostId: number;
  size: number;
}

/**
 * Idmapped bind mounts of `sources` (relative to `cwd`) on `targets` (existing dirs), with a user
 * namespace of these maps: a file owned by id N in a source shows up owned by the id N maps to. Needs
 * the mount helper (util-linux 2.38 has no idmap option): undefined when there is none. Throws a
 * SyscallError with the kernel's errno (EINVAL, ENOSYS: the kernel or the filesystem cannot idmap).
 */
export function idmapMounts(uids: IdMapRange[], gids: IdMapRange[], cwd: string, sources: string[], targets: string[]): Promise<void> | undefined {
  const helper = mountHelper();
  if (!helper) return undefined;
  const text = (ranges: IdMapRange[]) => ranges.map((r) => `${r.containerId} ${r.hostId} ${r.size}\n`).join('');
  return helper.idmapMounts(text(uids), text(gids), cwd, sources, targets);
}

/** Unmounts `target`. Not mounted is not an error; `lazy` detaches a busy mount (MNT_DETACH). */
export async function unmount(target: string, lazy = false): Promise<void> {
  const helper = mountHelper();
  if (helper) {
    try {
      await helper.umount(target, lazy ? MNT_DETACH : 0);
    } catch (err) {
      // EINVAL: not a mount point; ENOENT: no such path, so nothing mounted there.
      if (err instanceof SyscallError && (err.errno === EINVAL || err.errno === ENOENT)) return;
      throw internal(`umount ${target} failed: ${(err as Error).message}`, err);
    }
    return;
  }
  if (!(await isMountPoint(target))) return;
  const r = await runCommand('umount', { args: lazy ? ['-l', target] : [target], timeoutMs: undefined });
  if (r.exitCode !== 0 && (await isMountPoint(target))) throw internal(`umount ${target} failed: ${commandFailure(r)}`);
}

/** Mount points of this mount namespace, from /proc/self/mountinfo (octal escapes decoded). */
export async function mountPoints(): Promise<Set<string>> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  const points = new Set<string>();
  for (const line of text.split('\n')) {
    const field = line.split(' ')[4];
    if (field) points.add(field.replace(/\\([0-7]{3})/g, (_m, octal: string) => String.fromCharCode(parseInt(octal, 8))));
  }
  return points;
}

/** True when `path` is a mount point. */
export async function isMountPoint(path: string): Promise<boolean> {
  return (await mountPoints()).has(path);
}
