/**
 * The image's declared VOLUMEs (its config's `Volumes`), by `runtime.image_volumes`:
 *
 *   copy    (default; containerd's `ignore_image_defined_volumes = false`) each gets a writable
 *           directory of the container's own, `<writable layer dir>/volumes/<n>`, holding a copy of
 *           what the image has at that path (owners, modes, times as in the image; an empty directory
 *           where the image has nothing), bind-mounted read-write. It lives beside the writable layer:
 *           counted in ContainerStats' writable layer and ImageFsInfo, removed with the root filesystem
 *           (RemoveContainer and every failed CreateContainer).
 *   mkdir   (CRI-O's default) the directory is made in the container's root filesystem, where missing,
 *           owned by the container's user: nothing is mounted (a read-only root filesystem stays so).
 *   ignore  nothing.
 *
 * A CRI mount at the same path wins (the volume is skipped), as do the pod's own files (/etc/hosts,
 * /etc/hostname, /etc/resolv.conf). The image is hostile: a path must be absolute, without `..`, not `/`
 * and not in /proc, /sys or /dev; it is resolved inside the root filesystem (symlinks followed within
 * it, never out); a path that is a file in the image, too many volumes or too large a tree to copy fail
 * the create with FAILED_PRECONDITION naming the image and the path.
 */
import { chown, lstat, mkdir, rm } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { MountPropagation, Mount as CriMount } from '../gen/runtime/v1/api.js';
import { failedPrecondition, internal, isKind, messageOf } from '../common/errors.js';
import { resolveInRootAllowMissing } from '../platform/resolve-in-root.js';
import { copyTree, CopyLimitError } from '../storage/copy-tree.js';
import { hostIdOf, type IdShift } from '../storage/idshift.js';

/** VOLUMEs an image may declare (Docker sets none; real images have a few). */
export const MAX_DECLARED_VOLUMES = 64;
/** Entries copied at most for one container, over all its volumes. */
export const MAX_COPY_ENTRIES = 100_000;
/** Directory levels copied at most below a volume. */
const MAX_COPY_DEPTH = 128;
/** A VOLUME path longer than this is refused (PATH_MAX). */
const MAX_PATH = 4096;

/** Where kernel filesystems and the pod's files are: a VOLUME there is refused or left to them. */
const KERNEL_DIRS = ['/proc', '/sys', '/dev'];
const POD_FILES = ['/etc/hostname', '/etc/hosts', '/etc/resolv.conf'];

/** The image's VOLUME paths this container gets, normalised and checked, sorted; `what` names the image. */
export function declaredVolumes(volumes: Record<string, unknown> | undefined, mounts: readonly CriMount[], what: string): string[] {
  if (!volumes || typeof volumes !== 'object') return [];
  const keys = Object.keys(volumes);
  if (keys.length > MAX_DECLARED_VOLUMES) {
    throw failedPrecondition(`${what} declares ${keys.length} VOLUMEs, more than the ${MAX_DECLARED_VOLUMES} Stove accepts (runtime.image_volumes = "ignore" runs it without them)`);
  }
  const taken = new Set(mounts.map((m) => posix.normalize(m.containerPath).replace(/(.)\/+$/, '$1')));
  const out = new Set<string>();
  for (const key of keys) {
    const shown = JSON.stringify(key.slice(0, 200));
    const refuse = (why: string) => failedPrecondition(`${what} declares VOLUME ${shown}, which ${why}`);
    if (key.length > MAX_PATH || key.includes('\0')) throw refuse('is not a valid path');
    if (!key.startsWith('/')) throw refuse('is not an absolute path');
    if (key.split('/').includes('..')) throw refuse('contains ".."');
    const path = posix.normalize(key).replace(/(.)\/+$/, '$1');
    if (path === '/') throw refuse('is the root filesystem itself');
    if (KERNEL_DIRS.some((d) => path === d || path.startsWith(`${d}/`))) throw refuse('is where a kernel filesystem is mounted');
    if (taken.has(path) || POD_FILES.includes(path)) continue;
    out.add(path);
  }
  return [...out].sort();
}

/**
 * `copy`: makes `<volumesDir>/<n>` for each path with the image's content there (from the container's
 * mounted root filesystem `rootfs`) and returns the CRI mounts for them. `rootOwner` owns an empty one
 * (host ids of the container's root: 0, or the pod's mapped root). On failure the caller removes
 * `volumesDir` (it is inside the writable layer's dir).
 */
export async function copyDeclaredVolumes(
  rootfs: string,
  paths: readonly string[],
  volumesDir: string,
  rootOwner: { uid: number; gid: number },
  what: string,
): Promise<CriMount[]> {
  if (!paths.length) return [];
  await rm(volumesDir, { recursive: true, force: true });
  await mkdir(volumesDir, { recursive: true, mode: 0o711 });
  const mounts: CriMount[] = [];
  let entriesLeft = MAX_COPY_ENTRIES;
  for (const [n, path] of paths.entries()) {
    const target = join(volumesDir, String(n));
    const label = `${what}: VOLUME "${path}"`;
    const source = await resolve(rootfs, path, label);
    if (source.exists) {
      const st = await lstat(source.path);
      if (!st.isDirectory()) throw failedPrecondition(`${label} is not a directory in the image`);
      try {
        const copied = await copyTree(source.path, target, { maxEntries: entriesLeft, maxDepth: MAX_COPY_DEPTH });
        entriesLeft -= copied.entries;
      } catch (err) {
        if (err instanceof CopyLimitError) {
          throw failedPrecondition(`${label}: the image's content there is too large to copy (${err.message}; at most ${MAX_COPY_ENTRIES} entries over all VOLUMEs)`);
        }
        throw internal(`${label}: copying the image's content failed: ${messageOf(err)}`, err);
      }
    } else {
      await mkdir(target, { mode: 0o755 });
      await chown(target, rootOwner.uid, rootOwner.gid);
    }
    mounts.push(CriMount.fromPartial({ containerPath: path, hostPath: target, readonly: false, propagation: MountPropagation.PROPAGATION_PRIVATE }));
  }
  return mounts;
}

/** `mkdir`: makes each path in the root filesystem where missing, the new directories owned by `owner` (host ids). */
export async function makeDeclaredVolumeDirs(rootfs: string, paths: readonly string[], owner: { uid: number; gid: number }, what: string): Promise<void> {
  for (const path of paths) {
    const label = `${what}: VOLUME "${path}"`;
    const at = await resolve(rootfs, path, label);
    if (at.exists) {
      if (!(await lstat(at.path)).isDirectory()) throw failedPrecondition(`${label} is not a directory in the image`);
      continue;
    }
    // Only the missing tail is made (it has no symlinks: nothing is there); each new dir gets the owner.
    const made = await mkdir(at.path, { recursive: true, mode: 0o755 });
    if (!made) continue;
    for (let dir = at.path; dir.length >= made.length; dir = posix.dirname(dir)) await chown(dir, owner.uid, owner.gid);
  }
}

/** The host ids of a container id pair: itself, or mapped by the pod's user namespace. */
export function hostOwner(uid: number, gid: number, shift: IdShift | undefined): { uid: number; gid: number } {
  if (!shift) return { uid, gid };
  return { uid: hostIdOf(shift.uids, uid) ?? uid, gid: hostIdOf(shift.gids, gid) ?? gid };
}

async function resolve(rootfs: string, path: string, label: string): Promise<{ path: string; exists: boolean }> {
  try {
    return await resolveInRootAllowMissing(rootfs, path.slice(1), label);
  } catch (err) {
    // A symlink out of the root filesystem, or a missing dir followed by "..": the image's doing.
    if (isKind(err, 'InvalidArgument') || isKind(err, 'NotFound')) throw failedPrecondition(messageOf(err), err);
    throw err;
  }
}
