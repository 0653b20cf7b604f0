/**
 * A copy of a directory tree of an image (the content of a declared VOLUME) into a directory of a
 * container's own, as containerd's `copyExistingContents` (continuity `fs.CopyDir`) makes it: every
 * entry with its owner, mode (set-user-ID and set-group-ID included) and modification time; symlinks
 * copied as symlinks, never followed; file capabilities (`security.capability`) kept.
 *
 * The source is hostile image content but cannot change meanwhile (the container's own root filesystem
 * before its process runs), so what `lstat` says of an entry stays true while it is copied. Nothing is
 * ever followed out of the tree: symlinks are recreated, not read through, and an entry on another
 * filesystem (a mount inside the tree) is not entered. Device nodes, FIFOs and sockets are left out
 * (counted in `skipped`); hardlinked files become separate copies. The walk is bounded: at most
 * `maxEntries` entries and `maxDepth` levels, else a `CopyLimitError` (the caller removes the target).
 */
import { chmod, copyFile, lchown, lstat, lutimes, mkdir, opendir, readlink, symlink, utimes, constants } from 'node:fs/promises';
import type { Stats } from 'node:fs';
import { join } from 'node:path';
import { xattrAddon } from './idshift.js';

/** File capabilities: the one extended attribute copied (the kernel drops it on chown, so set after). */
const CAPS_XATTR = 'security.capability';

export interface CopyLimits {
  /** Entries at most (directories, files and symlinks, the root included). */
  maxEntries: number;
  /** Directory levels at most below the root. */
  maxDepth: number;
}

export interface CopyResult {
  entries: number;
  bytes: number;
  /** Device nodes, FIFOs and sockets not copied. */
  skipped: number;
}

/** A tree larger than the limits allow. */
export class CopyLimitError extends Error {
  override name = 'CopyLimitError';
}

/**
 * Copies the directory `src` to `dst` (which must not exist; its parent must). Throws the fs error of
 * the first entry that fails, or CopyLimitError.
 */
export async function copyTree(src: string, dst: string, limits: CopyLimits): Promise<CopyResult> {
  const root = await lstat(src);
  if (!root.isDirectory()) throw new Error(`${src} is not a directory`);
  const result: CopyResult = { entries: 0, bytes: 0, skipped: 0 };
  // Directories get their mode and times after their entries are written (a read-only directory, or
  // a time the writes would change); deepest first.
  const dirs: { path: string; st: Stats }[] = [];
  const pending: { from: string; to: string; depth: number }[] = [{ from: src, to: dst, depth: 0 }];
  for (let item = pending.pop(); item; item = pending.pop()) {
    const st = item.from === src ? root : await lstat(item.from);
    if (++result.entries > limits.maxEntries) throw new CopyLimitError(`more than ${limits.maxEntries} entries`);
    if (st.isDirectory()) {
      if (st.dev !== root.dev) {
        result.skipped++;
        continue;
      }
      if (item.depth > limits.maxDepth) throw new CopyLimitError(`deeper than ${limits.maxDepth} levels`);
      await mkdir(item.to, { mode: 0o700 });
      await lchown(item.to, st.uid, st.gid);
      dirs.push({ path: item.to, st });
      const dir = await opendir(item.from, { bufferSize: 256 });
      for await (const entry of dir) {
        pending.push({ from: join(item.from, entry.name), to: join(item.to, entry.name), depth: item.depth + 1 });
        if (pending.length > limits.maxEntries) throw new CopyLimitError(`more than ${limits.maxEntries} entries`);
      }
    } else if (st.isFile()) {
      await copyFile(item.from, item.to, constants.COPYFILE_EXCL);
      await lchown(item.to, st.uid, st.gid);
      await chmod(item.to, st.mode & 0o7777); // after chown, which clears set-user-ID
      if (st.mode & 0o111) await copyCaps(item.from, item.to);
      await utimes(item.to, st.atime, st.mtime);
      result.bytes += st.size;
    } else if (st.isSymbolicLink()) {
      await symlink(await readlink(item.from), item.to);
      await lchown(item.to, st.uid, st.gid);
      await lutimes(item.to, st.atime, st.mtime);
    } else {
      result.skipped++;
    }
  }
  for (const d of dirs.reverse()) {
    await chmod(d.path, d.st.mode & 0o7777);
    await utimes(d.path, d.st.atime, d.st.mtime);
  }
  return result;
}

async function copyCaps(from: string, to: string): Promise<void> {
  const caps = await xattrAddon()
    .getAttribute(from, CAPS_XATTR)
    .catch(() => null);
  if (caps) await xattrAddon().setAttribute(to, CAPS_XATTR, caps);
}
