/**
 * Reading /etc/passwd and /etc/group from a container's root filesystem for resolveUser. The files are
 * looked up as the container would see them: symlinks are followed inside the rootfs (an absolute link
 * target starts again at the rootfs, `..` stops at it), never out to the host's files. The image decides
 * what they are: a FIFO or a device there must not block or exhaust the daemon (platform/safe-file.ts),
 * so only a regular file of at most MAX_USER_DB_BYTES is read, and anything else is FAILED_PRECONDITION
 * naming the file.
 */
import { lstat, readlink } from 'node:fs/promises';
import { posix } from 'node:path';
import { failedPrecondition, wrap } from '../common/errors.js';
import { settleAll } from '../common/settle.js';
import { readUntrustedFile, UntrustedFileError } from '../platform/safe-file.js';

/** The largest /etc/passwd or /etc/group read from an image (real ones are a few KiB). */
export const MAX_USER_DB_BYTES = 16 * 1024 * 1024;

const MAX_LINKS = 40;

/** The host path of `path` inside `root`, symlinks resolved within `root` (like openat2 RESOLVE_IN_ROOT). */
export async function resolveInRoot(root: string, path: string): Promise<string> {
  let pending = posix.normalize(path).split('/').filter(Boolean);
  const done: string[] = [];
  let links = 0;
  while (pending.length) {
    const part = pending.shift()!;
    if (part === '.') continue;
    if (part === '..') {
      done.pop();
      continue;
    }
    const host = posix.join(root, ...done, part);
    let isLink = false;
    try {
      isLink = (await lstat(host)).isSymbolicLink();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    if (!isLink) {
      done.push(part);
      continue;
    }
    if (++links > MAX_LINKS) throw Object.assign(new Error(`too many levels of symbolic links in ${path}`), { code: 'ELOOP' });
    const target = await readlink(host);
    const targetParts = target.split('/').filter(Boolean);
    if (target.startsWith('/')) done.length = 0;
    pending = [...targetParts, ...pending];
  }
  return posix.join(root, ...done);
}

/** A file's text from inside the rootfs, or null when it does not exist. */
export async function readRootfsFile(root: string, path: string, maxBytes = MAX_USER_DB_BYTES): Promise<string | null> {
  try {
    return (await readUntrustedFile(await resolveInRoot(root, path), maxBytes, path)).toString('utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    const context = `failed to read ${path} from the container's root filesystem`;
    if (err instanceof UntrustedFileError) throw failedPrecondition(`${context}: ${err.message}`, err);
    throw wrap(err, context);
  }
}

/**
 * The container's /etc/passwd and /etc/group (null when missing), for resolveUser. Both are read at
 * once, but when both fail the error is always /etc/passwd's, whichever read failed first.
 */
export async function readUserDatabase(root: string): Promise<{ passwd: string | null; group: string | null }> {
  const [passwd, group] = await settleAll([readRootfsFile(root, '/etc/passwd'), readRootfsFile(root, '/etc/group')]);
  return { passwd, group };
}
