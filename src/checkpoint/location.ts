/**
 * Where checkpoint archives may be: a CRI client names the path, and Stove (root) writes or reads it,
 * so only files directly or deeper below an allowed directory (`runtime.checkpoint_dirs` plus
 * `<root>/checkpoints`) qualify, reached without a symlink in the file name itself and without `..`.
 * The directories are compared after realpath(3), so a symlinked parent cannot lead elsewhere.
 */
import { lstat, realpath } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { invalidArgument } from '../common/errors.js';
import { fileTypeName } from '../platform/safe-file.js';

/** What the path is for: an archive to write (may exist: replaced) or one to read (must exist). */
export type ArchiveUse = 'write' | 'read';

function within(dir: string, root: string): boolean {
  return dir === root || dir.startsWith(root.endsWith('/') ? root : `${root}/`);
}

/** The allowed directories that exist, resolved. */
async function resolvedDirs(allowed: readonly string[]): Promise<string[]> {
  const out: string[] = [];
  for (const dir of allowed) {
    const real = await realpath(dir).catch(() => undefined);
    if (real) out.push(real);
  }
  return out;
}

/**
 * Checks an archive path from a request (`field` names it in messages) and returns it with its
 * directory resolved. INVALID_ARGUMENT for a relative path, `..`, a directory outside the allowed
 * ones, a symlink or non-regular file at the path, a missing file to read or a missing directory.
 */
export async function checkArchivePath(path: string, allowed: readonly string[], field: string, use: ArchiveUse): Promise<string> {
  const allowedText = allowed.join(', ');
  if (!path.startsWith('/')) throw invalidArgument(`${field} "${path}" must be an absolute path`);
  if (path.includes('\0') || path.length > 4096) throw invalidArgument(`${field} must be a path of at most 4096 bytes without NUL`);
  if (path.split('/').includes('..')) throw invalidArgument(`${field} "${path}" must not contain ".."`);
  const name = basename(path);
  if (!name || name === '.' || path.endsWith('/')) throw invalidArgument(`${field} "${path}" must name a file`);
  const dir = await realpath(dirname(path)).catch(() => undefined);
  if (!dir) throw invalidArgument(`${field} "${path}": its directory does not exist (checkpoint archives go in ${allowedText})`);
  const roots = await resolvedDirs(allowed);
  if (!roots.some((root) => within(dir, root))) {
    throw invalidArgument(`${field} "${path}" is outside the directories checkpoint archives may be in (${allowedText}; runtime.checkpoint_dirs)`);
  }
  const target = join(dir, name);
  const st = await lstat(target).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw err;
  });
  if (!st) {
    if (use === 'read') throw invalidArgument(`${field} "${path}": no such checkpoint archive`);
    return target;
  }
  if (!st.isFile()) throw invalidArgument(`${field} "${path}" is ${fileTypeName(st.mode)}, not a regular file`);
  return target;
}

/** True when a CreateContainer image names a checkpoint archive rather than an image (CRI-O's rule: a path). */
export function isArchivePath(image: string): boolean {
  return image.startsWith('/');
}
