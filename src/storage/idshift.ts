/**
 * Shifting the owners of a container's root filesystem into a user namespace's host range, for pods
 * with their own user namespace on an OCI runtime without idmapped mounts.
 *
 * Inside a user namespace, a file whose owner has no mapping shows up as the overflow id (nobody), so
 * the container's root could read an image's files but not create anything in its directories — not
 * even the mount points (`/etc/hosts`, …) the runtime makes at create time. Chowning every entry of the
 * container's overlay view from (uid, gid) to the host ids the pod's mappings give them (containerd's
 * approach before idmapped mounts, and that of containers/storage) makes the files the container's
 * own. With the overlay mounted `metacopy=on`, a chown copies up only the inode, not the data.
 *
 * A runtime with idmapped mounts (runc ≥ 1.2, crun ≥ 1.9) needs none of this: the spec asks for an
 * idmapped root filesystem and the kernel shifts ids on access, at no cost per file.
 */
import { chmod, lchown, lstat, opendir } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';

interface Xattr {
  getAttribute(path: string, name: string): Promise<Buffer | null>;
  setAttribute(path: string, name: string, value: Buffer): Promise<void>;
}
let loadedXattr: Xattr | undefined;
/** The native xattr addon, loaded at the first shift (most nodes never shift). */
export const xattrAddon = (): Xattr => (loadedXattr ??= createRequire(import.meta.url)('@napi-rs/xattr') as Xattr);
const xattr = xattrAddon;

/** File capabilities (`getcap`); the kernel drops them on chown. */
const CAPS_XATTR = 'security.capability';
const VFS_CAP_REVISION_MASK = 0xff000000;
const VFS_CAP_REVISION_2 = 0x02000000;
const VFS_CAP_REVISION_3 = 0x03000000;
const XATTR_CAPS_SZ_2 = 20;
const XATTR_CAPS_SZ_3 = 24;

/** One range of a user namespace map (OCI `LinuxIDMapping`, CRI `IDMapping`). */
export interface IdRange {
  containerId: number;
  hostId: number;
  size: number;
}

export interface IdShift {
  uids: IdRange[];
  gids: IdRange[];
}

/** The host id an id inside the namespace maps to; undefined when no range covers it. */
export function hostIdOf(ranges: IdRange[], id: number): number | undefined {
  for (const r of ranges) {
    if (id >= r.containerId && id < r.containerId + r.size) return r.hostId + (id - r.containerId);
  }
  return undefined;
}

export interface ShiftResult {
  /** Entries chowned. */
  shifted: number;
  /** Entries left alone because their uid or gid has no mapping (the container sees them as nobody). */
  unmapped: number;
}

/**
 * A `security.capability` value that takes effect inside the user namespace: file capabilities apply
 * only where their root id (host uid 0 for a v2 value) is the namespace's root, so the value becomes
 * v3 with the root id shifted like a file owner (`setcap` run as the namespace's root writes the same).
 * Undefined for a value that is not a v2/v3 capability set or whose root id has no mapping.
 */
export function shiftFileCaps(value: Buffer, uids: IdRange[]): Buffer | undefined {
  if (value.length < 4) return undefined;
  const magic = value.readUInt32LE(0);
  const revision = (magic & VFS_CAP_REVISION_MASK) >>> 0;
  let rootId: number;
  if (revision === VFS_CAP_REVISION_2 && value.length === XATTR_CAPS_SZ_2) rootId = 0;
  else if (revision === VFS_CAP_REVISION_3 && value.length === XATTR_CAPS_SZ_3) rootId = value.readUInt32LE(20);
  else return undefined;
  const hostRoot = hostIdOf(uids, rootId);
  if (hostRoot === undefined) return undefined;
  const out = Buffer.alloc(XATTR_CAPS_SZ_3);
  value.copy(out, 0, 0, XATTR_CAPS_SZ_2);
  out.writeUInt32LE(((magic & ~VFS_CAP_REVISION_MASK) | VFS_CAP_REVISION_3) >>> 0, 0);
  out.writeUInt32LE(hostRoot, 20);
  return out;
}

/** Entries processed at the same time. */
const CONCURRENCY = 32;
/** chown clears set-user-ID and set-group-ID: these bits are put back. */
const SUID_SGID = 0o6000;

/**
 * Chowns every entry under `root` (itself included; symlinks themselves, never their targets) from
 * the ids the image gave it to the mapped host ids, keeping set-user-ID/set-group-ID bits and file
 * capabilities (which chown clears). Does not cross into other mounts.
 */
export async function shiftOwnership(root: string, shift: IdShift): Promise<ShiftResult> {
  const rootDev = (await lstat(root)).dev;
  const result: ShiftResult = { shifted: 0, unmapped: 0 };
  const pending: string[] = [root];
  const visit = async (path: string): Promise<void> => {
    const st = await lstat(path);
    if (st.dev !== rootDev) return;
    const uid = hostIdOf(shift.uids, st.uid);
    const gid = hostIdOf(shift.gids, st.gid);
    if (uid === undefined || gid === undefined) result.unmapped++;
    // An id without a mapping stays as it is (the container sees the overflow id).
    if ((uid ?? st.uid) !== st.uid || (gid ?? st.gid) !== st.gid) {
      const caps = st.isFile() ? await xattr().getAttribute(path, CAPS_XATTR).catch(() => null) : null;
      await lchown(path, uid ?? st.uid, gid ?? st.gid);
      if (!st.isSymbolicLink() && st.mode & SUID_SGID) await chmod(path, st.mode & 0o7777);
      const shiftedCaps = caps && shiftFileCaps(caps, shift.uids);
      if (shiftedCaps) await xattr().setAttribute(path, CAPS_XATTR, shiftedCaps);
      result.shifted++;
    }
    if (!st.isDirectory()) return;
    const dir = await opendir(path, { bufferSize: 256 });
    for await (const entry of dir) pending.push(join(path, entry.name));
  };
  // A small pool of workers over a shared queue: directories feed the queue as they are read.
  const worker = async (): Promise<void> => {
    for (let path = pending.pop(); path !== undefined; path = pending.pop()) await visit(path);
  };
  while (pending.length) await Promise.all(Array.from({ length: Math.min(CONCURRENCY, pending.length) }, worker));
  return result;
}
