/**
 * Resolves a relative path inside a directory tree the way a chroot would see it: symlinks are followed
 * within the tree (an absolute target starts again at the tree's root), and nothing may lead above the
 * root. Meant for trees nobody can change meanwhile (a read-only image mount), so the answer stays true.
 */
import { lstat, readlink } from 'node:fs/promises';
import { join } from 'node:path';
import { invalidArgument, notFound } from '../common/errors.js';

/** Linux's limit on symlinks followed in one lookup. */
const MAX_SYMLINKS = 40;

/**
 * The host path of `relativePath` inside `root` (a path without symlinks), with every symlink resolved;
 * `what` names the path in errors. NotFound when a component is missing; InvalidArgument for a path that
 * would leave the root.
 */
export async function resolveInRoot(root: string, relativePath: string, what: string): Promise<string> {
  const { path, missing } = await resolvePrefix(root, relativePath, what);
  if (missing) throw notFound(`${what} does not exist (no "${missing}")`);
  return path;
}

/**
 * As `resolveInRoot`, but a path whose last components do not exist is fine: the answer is where they
 * would be made (`exists` false). A `..` after a missing component, which no lookup could resolve,
 * is InvalidArgument.
 */
export async function resolveInRootAllowMissing(root: string, relativePath: string, what: string): Promise<{ path: string; exists: boolean }> {
  const { path, missing, rest } = await resolvePrefix(root, relativePath, what);
  if (!missing) return { path, exists: true };
  if (rest.includes('..')) throw invalidArgument(`${what} leads through "${missing}", which does not exist, and then ".."`);
  return { path: join(path, ...rest), exists: false };
}

/** Resolves as far as the tree goes: the path reached, and the first missing component with those after it. */
async function resolvePrefix(root: string, relativePath: string, what: string): Promise<{ path: string; missing?: string; rest: string[] }> {
  let pending = components(relativePath);
  const resolved: string[] = [];
  let followed = 0;
  while (pending.length > 0) {
    const part = pending.shift()!;
    if (part === '..') {
      if (resolved.length === 0) throw invalidArgument(`${what} leads outside its root through a symlink`);
      resolved.pop();
      continue;
    }
    const path = join(root, ...resolved, part);
    let isLink: boolean;
    try {
      isLink = (await lstat(path)).isSymbolicLink();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
        return { path: join(root, ...resolved), missing: [...resolved, part].join('/'), rest: [part, ...pending] };
      }
      if ((err as NodeJS.ErrnoException).code === 'ENOTDIR') throw notFound(`${what} does not exist (no "${[...resolved, part].join('/')}")`);
      throw err;
    }
    if (!isLink) {
      resolved.push(part);
      continue;
    }
    if (++followed > MAX_SYMLINKS) throw invalidArgument(`${what}: too many levels of symbolic links`);
    const target = await readlink(path);
    if (target.startsWith('/')) resolved.length = 0;
    pending = [...components(target), ...pending];
  }
  return { path: join(root, ...resolved), rest: [] };
}

function components(path: string): string[] {
  return path.split('/').filter((p) => p !== '' && p !== '.');
}
