/**
 * Writes one image layer's tar entries into a fresh, empty directory with synchronous fd-based calls
 * (run inside a worker thread: per-entry promise hops made async extraction several times slower).
 *
 * Every layer gets its own directory (the overlay model), so nothing an earlier layer planted can be
 * followed. Within the layer:
 *  - names are normalised; one that climbs out with `..` is rejected (a leading `/` is dropped);
 *  - parent directories are checked with lstat and never followed through a symlink: an entry below
 *    a symlink is rejected, as is a hardlink whose target is outside the layer;
 *  - files are created O_CREAT|O_EXCL|O_NOFOLLOW after removing whatever was at that name.
 *  - `dirs` holds the directories verified so far and forgets a subtree the moment it is replaced, so
 *    every path-based call (mkdir, symlink, link, chown, chmod, xattrs) resolves through verified
 *    directories only; directory times, applied last, are re-verified component by component with
 *    lstat then (an `a/`, `a/b/`, `a -> /host` sequence must not reach `/host/b`).
 * OCI whiteouts become overlayfs whiteouts: `.wh.NAME` → char device 0:0 `NAME` (a hardlink to one
 * template whiteout, so a whiteout costs no mknod), `.wh..wh..opq` → the parent directory
 * gets `trusted.overlay.opaque=y`. NAME must be a plain name (not empty, `.` or `..`).
 * Extended attributes from the layer pass a policy (see `acceptedXattr`): overlayfs' private ones are
 * dropped, since overlay trusts them (metacopy, redirect) and a layer must not forge them.
 */
import {
  closeSync,
  constants as fsConstants,
  fchmodSync,
  fchownSync,
  futimesSync,
  linkSync,
  lchownSync,
  lstatSync,
  lutimesSync,
  mkdirSync,
  openSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  writeSync,
  chmodSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import type { NodeSpec } from '../platform/mknod.js';
import type { TarEntryType, TarHeader, TarSink } from './tar-reader.js';

const require = createRequire(import.meta.url);
const xattr = require('@napi-rs/xattr') as {
  setAttributeSync(path: string, name: string, value: Uint8Array | string): void;
};

/** A layer entry that would escape the layer directory, or is otherwise refused. */
export class UnsafeEntryError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UnsafeEntryError';
  }
}

export interface LayerUsage {
  /** Bytes the layer occupies (file sizes rounded up to 4 KiB blocks, 4 KiB per directory). */
  bytes: number;
  inodes: number;
}

const WHITEOUT_PREFIX = '.wh.';
const OPAQUE = '.wh..wh..opq';
// libuv adds O_CLOEXEC itself.
const OPEN_FLAGS = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW;
const BLOCK = 4096;

/**
 * Whether a layer may set xattr `name`, as containerd's and CRI-O's unpackers decide: user attributes
 * (but not overlayfs' `user.overlay.*` of userxattr mounts), file capabilities and POSIX ACLs. Every
 * `trusted.*` (overlayfs' `trusted.overlay.*` among them: opaque, redirect, metacopy, origin) and every
 * other `security.*` (SELinux, IMA/EVM labels belong to the host's policy) is dropped.
 */
export function acceptedXattr(name: string): boolean {
  if (name.startsWith('user.')) return !name.startsWith('user.overlay.');
  return name === 'security.capability' || name === 'system.posix_acl_access' || name === 'system.posix_acl_default';
}

/** Normalises an entry name to a path relative to the layer root; throws if it climbs out. */
export function normaliseEntryName(name: string): string {
  if (name.includes('\0')) throw new UnsafeEntryError(`entry name ${JSON.stringify(name)} contains a NUL byte`);
  const parts: string[] = [];
  for (const part of name.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') {
      if (parts.length === 0) throw new UnsafeEntryError(`entry "${name}" points outside the layer`);
      parts.pop();
    } else {
      parts.push(part);
    }
  }
  return parts.join('/');
}

interface DeferredDir {
  /** Relative to the layer root. */
  rel: string;
  atime: number;
  mtime: number;
}

/**
 * Stricter rules for an archive that is not an image layer (a checkpoint archive, its root filesystem
 * diff): entry types it may not hold, names that must be plain relative paths (no `..`, no leading
 * `/`), no whiteout names, and a cap on the number of entries. An entry naming the root itself is
 * skipped (the archive does not set the target directory's owner or mode).
 */
export interface EntryPolicy {
  /** What the archive is, for messages (`checkpoint archive`). */
  what: string;
  refusedTypes: readonly TarEntryType[];
  maxEntries: number;
}

/** Checks a name under an EntryPolicy: relative, without `..`, NUL or a whiteout prefix. */
export function checkStrictName(name: string, what: string): void {
  if (name.startsWith('/')) throw new UnsafeEntryError(`${what} entry "${name}" is an absolute path`);
  const parts = name.split('/');
  if (parts.includes('..')) throw new UnsafeEntryError(`${what} entry "${name}" contains ".."`);
  if (parts.some((p) => p.startsWith(WHITEOUT_PREFIX))) throw new UnsafeEntryError(`${what} entry "${name}" is a whiteout name`);
}

export interface ExtractorOptions {
  /** An existing char device 0:0 on the same filesystem, hardlinked for each whiteout. */
  whiteoutTemplate?: string;
  /** Absent: an image layer's rules. */
  policy?: EntryPolicy;
  /** Creates a device node or fifo, synchronously (Node has no mknod; see mknod-bridge.ts). */
  mknod: (path: string, node: NodeSpec) => void;
}

export class LayerExtractor implements TarSink {
  /** Relative paths known to be real directories created or checked in this layer. */
  private readonly dirs = new Set<string>(['']);
  private readonly deferred: DeferredDir[] = [];
  private fd = -1;
  private current?: { header: TarHeader; path: string };
  private readonly whiteoutTemplate?: string;
  private readonly mknod: ExtractorOptions['mknod'];
  private readonly policy?: EntryPolicy;
  private entries = 0;
  readonly usage: LayerUsage = { bytes: BLOCK, inodes: 1 };

  constructor(
    private readonly root: string,
    options: ExtractorOptions,
  ) {
    this.whiteoutTemplate = options.whiteoutTemplate;
    this.mknod = options.mknod;
    this.policy = options.policy;
  }

  /** Applies the policy to one entry; false when the entry is to be skipped. */
  private admitted(header: TarHeader, rel: string): boolean {
    const policy = this.policy;
    if (!policy) return true;
    if (++this.entries > policy.maxEntries) throw new UnsafeEntryError(`${policy.what} has more than ${policy.maxEntries} entries`);
    checkStrictName(header.name, policy.what);
    if (policy.refusedTypes.includes(header.type)) {
      throw new UnsafeEntryError(`${policy.what} entry "${header.name}" is a ${header.type === 'hardlink' ? 'hard link' : header.type === 'char' || header.type === 'block' ? `${header.type} device` : header.type}, which it may not hold`);
    }
    if (rel === '' && header.type !== 'dir') throw new UnsafeEntryError(`${policy.what} entry "${header.name}" would replace the root`);
    return rel !== '';
  }

  private abs(rel: string): string {
    return rel === '' ? this.root : `${this.root}/${rel}`;
  }

  entry(header: TarHeader): void {
    const rel = normaliseEntryName(header.name);
    if (!this.admitted(header, rel)) return;
    const slash = rel.lastIndexOf('/');
    const parent = slash < 0 ? '' : rel.slice(0, slash);
    const base = slash < 0 ? rel : rel.slice(slash + 1);
    this.current = { header, path: rel };

    if (rel === '') {
      if (header.type !== 'dir') throw new UnsafeEntryError(`entry "${header.name}" would replace the layer root`);
      this.applyDirMetadata('', header);
      return;
    }
    this.ensureParent(parent, header.name);

    if (base.startsWith(WHITEOUT_PREFIX)) {
      if (base === OPAQUE) {
        xattr.setAttributeSync(this.abs(parent), 'trusted.overlay.opaque', 'y');
      } else if (!base.startsWith(WHITEOUT_PREFIX + WHITEOUT_PREFIX)) {
        const name = base.slice(WHITEOUT_PREFIX.length);
        // `.wh..` or `.wh...` would name the directory itself or its parent (above the layer root at the top).
        if (name === '' || name === '.' || name === '..') throw new UnsafeEntryError(`invalid whiteout "${header.name}"`);
        this.makeWhiteout(parent ? `${parent}/${name}` : name);
      }
      // Other `.wh..wh.*` names are aufs bookkeeping (hardlink dirs): nothing to create.
      this.current = undefined;
      return;
    }

    const path = this.abs(rel);
    switch (header.type) {
      case 'dir':
        this.makeDir(rel, header);
        break;
      case 'file':
        this.removeExisting(rel);
        this.fd = openSync(path, OPEN_FLAGS, 0o600);
        this.usage.bytes += Math.ceil(header.size / BLOCK) * BLOCK;
        this.usage.inodes++;
        break;
      case 'symlink':
        this.removeExisting(rel);
        symlinkSync(header.linkname, path);
        this.usage.inodes++;
        if (header.uid !== 0 || header.gid !== 0) lchownSync(path, header.uid, header.gid);
        this.setXattrs(path, header, true);
        lutimesSync(path, header.atime ?? header.mtime, header.mtime);
        break;
      case 'hardlink':
        this.makeHardlink(rel, header);
        break;
      case 'char':
      case 'block':
      case 'fifo':
        this.makeNode(rel, header);
        break;
    }
  }

  data(chunk: Buffer): void {
    let offset = 0;
    while (offset < chunk.length) offset += writeSync(this.fd, chunk, offset, chunk.length - offset);
  }

  endEntry(): void {
    const current = this.current;
    this.current = undefined;
    if (this.fd < 0 || !current) return;
    const fd = this.fd;
    this.fd = -1;
    const { header, path } = current;
    try {
      if (header.uid !== 0 || header.gid !== 0) fchownSync(fd, header.uid, header.gid);
      // chown clears setuid/setgid, so the mode comes after it; xattrs after both (chown also drops
      // security.capability).
      fchmodSync(fd, header.mode);
      this.setXattrs(this.abs(path), header, false);
      futimesSync(fd, header.atime ?? header.mtime, header.mtime);
    } finally {
      closeSync(fd);
    }
  }

  /**
   * Applies directory times last (creating children changes them), only to paths whose every component
   * is, right now, a real directory of this layer: a later entry may have replaced a parent with a
   * symlink, and lutimes follows symlinks in the parents.
   */
  finish(): void {
    const verified = new Map<string, boolean>([['', true]]);
    const isRealDir = (rel: string): boolean => {
      let known = verified.get(rel);
      if (known === undefined) {
        const slash = rel.lastIndexOf('/');
        const parentOk = isRealDir(slash < 0 ? '' : rel.slice(0, slash));
        known = parentOk && lstatOrUndefined(this.abs(rel))?.isDirectory() === true;
        verified.set(rel, known);
      }
      return known;
    };
    for (let i = this.deferred.length - 1; i >= 0; i--) {
      const d = this.deferred[i]!;
      if (isRealDir(d.rel)) lutimesSync(this.abs(d.rel), d.atime, d.mtime);
    }
    this.deferred.length = 0;
  }

  /** Closes an open file after a failure (the caller then removes the whole directory). */
  abort(): void {
    if (this.fd >= 0) {
      try {
        closeSync(this.fd);
      } catch {
        // already failing
      }
      this.fd = -1;
    }
  }

  /** Makes sure every component of `rel` is a real directory, creating missing ones. */
  private ensureParent(rel: string, entryName: string): void {
    if (this.dirs.has(rel)) return;
    let prefix = '';
    for (const part of rel.split('/')) {
      prefix = prefix ? `${prefix}/${part}` : part;
      if (this.dirs.has(prefix)) continue;
      const st = lstatOrUndefined(this.abs(prefix));
      if (!st) {
        mkdirSync(this.abs(prefix), 0o755);
        this.usage.bytes += BLOCK;
        this.usage.inodes++;
      } else if (st.isSymbolicLink()) {
        throw new UnsafeEntryError(`entry "${entryName}" would be written through the symlink "${prefix}"`);
      } else if (!st.isDirectory()) {
        throw new UnsafeEntryError(`entry "${entryName}" needs "${prefix}" to be a directory, but it is not`);
      }
      this.dirs.add(prefix);
    }
  }

  /** Removes what a later entry replaces; a directory stays only if the new entry is one too. */
  private removeExisting(rel: string, keepDir = false): boolean {
    const path = this.abs(rel);
    const st = lstatOrUndefined(path);
    if (!st) return false;
    if (st.isDirectory()) {
      if (keepDir) return true;
      rmSync(path, { recursive: true, force: true });
      for (const d of this.dirs) if (d === rel || d.startsWith(rel + '/')) this.dirs.delete(d);
      return false;
    }
    unlinkSync(path);
    return false;
  }

  private makeDir(rel: string, header: TarHeader): void {
    const exists = this.removeExisting(rel, true);
    if (!exists) {
      mkdirSync(this.abs(rel), 0o700);
      this.usage.bytes += BLOCK;
      this.usage.inodes++;
    }
    this.dirs.add(rel);
    this.applyDirMetadata(rel, header);
  }

  private applyDirMetadata(rel: string, header: TarHeader): void {
    const path = this.abs(rel);
    if (header.uid !== 0 || header.gid !== 0) lchownSync(path, header.uid, header.gid);
    chmodSync(path, header.mode);
    this.setXattrs(path, header, false);
    this.deferred.push({ rel, atime: header.atime ?? header.mtime, mtime: header.mtime });
  }

  private makeHardlink(rel: string, header: TarHeader): void {
    const target = normaliseEntryName(header.linkname);
    if (target === '') throw new UnsafeEntryError(`hardlink "${header.name}" points at the layer root`);
    const slash = target.lastIndexOf('/');
    const targetParent = slash < 0 ? '' : target.slice(0, slash);
    // The target's parents must be real directories of this layer (never a symlink).
    for (let p = targetParent; p !== ''; p = p.includes('/') ? p.slice(0, p.lastIndexOf('/')) : '') {
      if (this.dirs.has(p)) break;
      const st = lstatOrUndefined(this.abs(p));
      if (!st || st.isSymbolicLink() || !st.isDirectory())
        throw new UnsafeEntryError(`hardlink "${header.name}" → "${header.linkname}" goes through "${p}", which is not a directory of this layer`);
    }
    const st = lstatOrUndefined(this.abs(target));
    if (!st) throw new UnsafeEntryError(`hardlink "${header.name}" → "${header.linkname}": target is not in this layer`);
    if (st.isDirectory()) throw new UnsafeEntryError(`hardlink "${header.name}" → "${header.linkname}": target is a directory`);
    if (target === rel) return;
    this.removeExisting(rel);
    const path = this.abs(rel);
    linkSync(this.abs(target), path);
    // A hard link's header sets the owner, mode, xattrs and times of the inode it shares, as containerd and
    // CRI-O apply it (archivers write the file's own), so one image gives the same files on every runtime.
    // chown first: it clears setuid bits and security.capability, which the mode and xattrs then restore.
    lchownSync(path, header.uid, header.gid);
    if (st.isSymbolicLink()) {
      this.setXattrs(path, header, true);
    } else {
      chmodSync(path, header.mode);
      this.setXattrs(path, header, false);
    }
    lutimesSync(path, header.atime ?? header.mtime, header.mtime);
  }

  private makeNode(rel: string, header: TarHeader): void {
    this.removeExisting(rel);
    const path = this.abs(rel);
    const type = header.type === 'char' ? 'c' : header.type === 'block' ? 'b' : 'p';
    this.mknod(path, { type, mode: header.mode & 0o7777, major: header.devmajor, minor: header.devminor });
    this.usage.inodes++;
    if (header.uid !== 0 || header.gid !== 0) lchownSync(path, header.uid, header.gid);
    if (header.mode & 0o7000) chmodSync(path, header.mode);
    this.setXattrs(path, header, false);
    lutimesSync(path, header.atime ?? header.mtime, header.mtime);
  }

  private makeWhiteout(rel: string): void {
    this.removeExisting(rel);
    const path = this.abs(rel);
    if (this.whiteoutTemplate) {
      try {
        linkSync(this.whiteoutTemplate, path);
        this.usage.inodes++;
        return;
      } catch (err) {
        // EMLINK (too many links) or EXDEV: fall back to a node of its own.
        if (!['EMLINK', 'EXDEV', 'ENOENT'].includes((err as NodeJS.ErrnoException).code ?? '')) throw err;
      }
    }
    this.mknod(path, { type: 'c', mode: 0, major: 0, minor: 0 });
    this.usage.inodes++;
  }

  private setXattrs(path: string, header: TarHeader, symlink: boolean): void {
    if (!header.xattrs) return;
    for (const [name, value] of header.xattrs) {
      if (!acceptedXattr(name)) continue;
      try {
        xattr.setAttributeSync(path, name, value);
      } catch (err) {
        // user.* xattrs are not allowed on symlinks; anything else is a real failure.
        if (symlink && name.startsWith('user.')) continue;
        throw new Error(`setting xattr ${name} on "${header.name}": ${(err as Error).message}`);
      }
    }
  }
}

function lstatOrUndefined(path: string) {
  try {
    return lstatSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}
