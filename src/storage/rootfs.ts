/**
 * Container root filesystems: an overlay mount whose lower dirs are the image's unpacked layers and
 * whose upper/work dirs belong to the container. `mount` runs with the images dir as its working
 * directory and the layers given as short relative links, so even images with hundreds of layers
 * fit in the one page of mount data the kernel accepts.
 */
import { lstatSync, opendirSync, readdirSync, type Dir } from 'node:fs';
import { lchown, mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { idmapMounts, mount, unmount } from '../platform/mount.js';
import { SyscallError } from '../platform/mount-helper.js';
import { hostIdOf, type IdShift } from './idshift.js';
import { internal } from '../common/errors.js';
import { settleAll } from '../common/settle.js';

/** The kernel copies at most one page of mount options. */
export const MOUNT_DATA_LIMIT = 4096;

export interface OverlaySpec {
  /** Directory the lower paths are relative to. */
  baseDir: string;
  /** Lower dirs relative to baseDir, top first. */
  lowerDirs: string[];
  upperDir: string;
  workDir: string;
  target: string;
  /**
   * `metacopy=on`: a change of owner or mode copies up only the inode, not the file's data (used when
   * the whole tree is chowned, see idshift.ts). Every later mount of the same upper dir needs it too.
   */
  metacopy?: boolean;
}

/** The option list for an overlay mount; throws if it cannot fit in the mount data page. */
export function overlayOptions(spec: OverlaySpec): string[] {
  const options = [`lowerdir=${spec.lowerDirs.join(':')}`, `upperdir=${spec.upperDir}`, `workdir=${spec.workDir}`];
  if (spec.metacopy) options.push('metacopy=on');
  const length = options.join(',').length + 1;
  if (length > MOUNT_DATA_LIMIT)
    throw internal(`overlay mount options for ${spec.lowerDirs.length} layers take ${length} bytes, more than the ${MOUNT_DATA_LIMIT}-byte limit`);
  return options;
}

/**
 * Creates upper/work (if needed) and the target, and mounts the overlay on target. `alongside` (e.g. a
 * record that must exist before the mount) runs while the directories are made.
 */
export async function mountOverlay(spec: OverlaySpec, alongside?: Promise<unknown>): Promise<void> {
  const options = overlayOptions(spec);
  // The dir holding upper and work is root's alone (a root container's writable layer may hold a
  // set-user-ID program); upper keeps 0755, the mode of the container's `/`.
  await mkdir(dirname(spec.upperDir), { recursive: true, mode: 0o700 });
  // Settled together: a failed mkdir must not unwind the create while `alongside` is still writing.
  await settleAll([
    mkdir(spec.upperDir, { recursive: true, mode: 0o755 }),
    mkdir(spec.workDir, { recursive: true, mode: 0o700 }),
    mkdir(spec.target, { recursive: true, mode: 0o755 }),
    alongside ?? Promise.resolve(),
  ]);
  await mount({ type: 'overlay', source: 'overlay', target: spec.target, options, cwd: spec.baseDir });
}

/** errnos of an idmapped mount the kernel or the filesystem cannot make (EPERM, ENOSYS, EINVAL, EOPNOTSUPP). */
const CANNOT_IDMAP = new Set([1, 22, 38, 95]);

/**
 * The overlay of mountOverlay for a container in a user namespace, with its lower dirs idmapped by the
 * pod's maps (as containerd 2's overlay snapshotter and containers/storage do it): each layer is
 * bind-mounted idmapped under `<dir of upper>/idmapped/<n>` (the mount helper's open_tree and
 * mount_setattr), the overlay is mounted on those, and they are detached again (the overlay holds
 * private clones of its layers). A file of the image owned by N is seen owned by the host id N maps to,
 * with its set-user-ID bits and file capabilities; nothing is chowned or copied up. The root of the
 * upper dir is given to the mapped root, as the overlay's `/` takes its owner from it.
 *
 * Resolves false when the mount cannot be made that way (no mount helper, or a kernel or filesystem
 * that cannot idmap the layers), with nothing mounted: the caller then chowns (idshift.ts).
 */
export async function mountIdmappedOverlay(spec: OverlaySpec, shift: IdShift, alongside?: Promise<unknown>): Promise<boolean> {
  const parent = dirname(spec.upperDir);
  const layersDir = join(parent, 'idmapped');
  const targets = spec.lowerDirs.map((_l, i) => join(layersDir, String(i)));
  const relativeTargets = targets.map((_t, i) => join('idmapped', String(i)));
  const options = overlayOptions({ ...spec, lowerDirs: relativeTargets, metacopy: false });
  await mkdir(parent, { recursive: true, mode: 0o700 });
  await settleAll([
    mkdir(spec.upperDir, { recursive: true, mode: 0o755 }),
    mkdir(spec.workDir, { recursive: true, mode: 0o700 }),
    mkdir(spec.target, { recursive: true, mode: 0o755 }),
    ...targets.map((t) => mkdir(t, { recursive: true, mode: 0o700 })),
    alongside ?? Promise.resolve(),
  ]);
  const attached = idmapMounts(shift.uids, shift.gids, spec.baseDir, spec.lowerDirs, targets);
  if (!attached) return false;
  try {
    await attached;
  } catch (err) {
    if (err instanceof SyscallError && CANNOT_IDMAP.has(err.errno)) return false;
    throw internal(`idmapped mounts of ${spec.lowerDirs.length} layers under ${layersDir} failed: ${(err as Error).message}`, err);
  }
  try {
    const uid = hostIdOf(shift.uids, 0);
    const gid = hostIdOf(shift.gids, 0);
    if (uid !== undefined && gid !== undefined) await lchown(spec.upperDir, uid, gid);
    await mount({ type: 'overlay', source: 'overlay', target: spec.target, options, cwd: parent });
  } finally {
    await settleAll(targets.map((t) => unmount(t, true)));
  }
  return true;
}

/**
 * Mounts the layers read-only on target (an image volume): no upper dir, so nothing can be written,
 * and nosuid, nodev, noexec, as CRI-O mounts image volumes (KEP-4639: read-only and not executable).
 * overlayfs wants two lower dirs without an upper one: `padDir` (an empty dir, relative to baseDir) makes
 * up the second for a one-layer image; an image without layers is the empty dir itself, bound read-only.
 */
export async function mountReadOnlyOverlay(spec: { baseDir: string; lowerDirs: string[]; padDir: string; target: string }): Promise<void> {
  // Not noexec: cri-api v0.36 dropped it from image volumes (kubernetes#135775), which may carry tools.
  const flags = ['ro', 'nosuid', 'nodev'];
  await mkdir(spec.target, { recursive: true, mode: 0o755 });
  if (spec.lowerDirs.length === 0) {
    await mount({ type: 'none', source: join(spec.baseDir, spec.padDir), target: spec.target, options: ['bind'] });
    await mount({ type: 'none', source: 'none', target: spec.target, options: ['remount', 'bind', ...flags] });
    return;
  }
  const lowerDirs = spec.lowerDirs.length >= 2 ? spec.lowerDirs : [...spec.lowerDirs, spec.padDir];
  const options = [`lowerdir=${lowerDirs.join(':')}`, ...flags];
  if (options.join(',').length + 1 > MOUNT_DATA_LIMIT) throw internal(`overlay mount options for ${lowerDirs.length} layers do not fit in one page`);
  await mount({ type: 'overlay', source: 'overlay', target: spec.target, options, cwd: spec.baseDir });
}

export async function unmountOverlay(target: string): Promise<void> {
  await unmount(target);
}

export interface DiskUsage {
  bytes: bigint;
  inodes: bigint;
}

/** Entries diskUsage visits between yields to the event loop. */
const DISK_USAGE_SLICE = 512;

/**
 * A directory no larger than this (its own st_size: a few hundred entries on ext4 or xfs) is read
 * whole with readdirSync; a larger one through a directory handle, a few entries at a time, so no
 * directory a container makes costs more memory than that. A `Dir` costs more than reading a small
 * directory: node builds two promisified methods for each one.
 */
const SMALL_DIR_BYTES = 16n << 10n;

/**
 * Space used under a directory: allocated blocks of each inode once, and the inode count. The walk
 * runs synchronously in slices of DISK_USAGE_SLICE entries with a yield between them: a writable layer
 * is mostly a handful of files, and the async calls per entry cost 4x the CPU of the walk itself (a
 * kubelet asks for every container's stats every 10-15 s), while a slice of a large layer blocks the
 * daemon for a few ms at most. One directory handle is open per level being read; only inodes with
 * more than one link are remembered (the only ones a walk can meet twice).
 */
export async function diskUsage(dir: string): Promise<DiskUsage> {
  const seen = new Set<string>();
  let bytes = 0n;
  let inodes = 0n;
  const open: ({ dir: Dir; path: string } | { names: string[]; next: number; path: string })[] = [];
  const visit = (path: string): void => {
    let st;
    try {
      st = lstatSync(path, { bigint: true });
    } catch {
      return;
    }
    if (st.nlink > 1n && !st.isDirectory()) {
      const key = `${st.dev}:${st.ino}`;
      if (seen.has(key)) return;
      seen.add(key);
    }
    bytes += st.blocks * 512n;
    inodes += 1n;
    if (!st.isDirectory()) return;
    try {
      if (st.size <= SMALL_DIR_BYTES) open.push({ names: readdirSync(path), next: 0, path });
      else open.push({ dir: opendirSync(path, { bufferSize: 256 }), path });
    } catch {
      // unreadable: counted, not entered
    }
  };
  try {
    visit(dir);
    let budget = DISK_USAGE_SLICE;
    while (open.length) {
      if (--budget <= 0) {
        budget = DISK_USAGE_SLICE;
        await new Promise((resolve) => setImmediate(resolve));
      }
      const top = open[open.length - 1]!;
      let name: string | undefined;
      if ('names' in top) name = top.names[top.next++];
      else {
        try {
          name = top.dir.readSync()?.name;
        } catch {
          name = undefined;
        }
      }
      if (name !== undefined) {
        visit(join(top.path, name));
        continue;
      }
      open.pop();
      if ('dir' in top) top.dir.closeSync();
    }
  } finally {
    for (const top of open) if ('dir' in top) top.dir.closeSync();
  }
  return { bytes, inodes };
}
