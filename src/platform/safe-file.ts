/**
 * Opening files in places a container or an image controls. A path there may be a symlink to a host
 * file, a FIFO whose open(2) blocks a libuv worker until a writer comes (four of them stall every file
 * operation of the daemon), or a character device that never ends. So: no symlink is followed in the
 * last component (`O_NOFOLLOW`), open(2) never waits (`O_NONBLOCK`), only regular files are read, and
 * never more than a cap.
 */
import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { failedPrecondition, StoveError } from '../common/errors.js';

// libuv adds O_CLOEXEC to every open.
const { O_RDONLY, O_WRONLY, O_APPEND, O_CREAT, O_NOFOLLOW, O_NONBLOCK, O_NOCTTY } = constants;

/** What a non-regular file is, for messages. */
export function fileTypeName(mode: number): string {
  switch (mode & constants.S_IFMT) {
    case constants.S_IFIFO:
      return 'a FIFO';
    case constants.S_IFCHR:
      return 'a character device';
    case constants.S_IFBLK:
      return 'a block device';
    case constants.S_IFSOCK:
      return 'a socket';
    case constants.S_IFDIR:
      return 'a directory';
    case constants.S_IFLNK:
      return 'a symbolic link';
    default:
      return 'not a regular file';
  }
}

/** An error whose code says why an untrusted file was refused (ENOTREG is Stove's own). */
export class UntrustedFileError extends StoveError {
  constructor(
    message: string,
    readonly code: 'ELOOP' | 'ENOTREG' | 'EFBIG',
  ) {
    super('FailedPrecondition', message);
    this.name = 'UntrustedFileError';
  }
}

async function openNoFollow(path: string, flags: number, mode?: number, name = path): Promise<FileHandle> {
  try {
    return await open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, mode);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ELOOP') throw new UntrustedFileError(`"${name}" is a symbolic link`, 'ELOOP');
    throw err;
  }
}

async function assertRegular(fh: FileHandle, name: string): Promise<number> {
  const st = await fh.stat();
  if (!st.isFile()) throw new UntrustedFileError(`"${name}" is ${fileTypeName(st.mode)}, not a regular file`, 'ENOTREG');
  return st.size;
}

/** Bytes read per read(2) of an untrusted file. */
const READ_CHUNK = 64 * 1024;

/**
 * Reads a regular file of at most `maxBytes` without following a symlink at `path` and without ever
 * blocking in open(2). ENOENT and the like come through unchanged; a symlink, a non-regular file or
 * one over the cap is an UntrustedFileError whose message names the file as `name`.
 */
export async function readUntrustedFile(path: string, maxBytes: number, name = path): Promise<Buffer> {
  const fh = await openNoFollow(path, O_RDONLY, undefined, name);
  try {
    const size = await assertRegular(fh, name);
    const tooBig = () => new UntrustedFileError(`"${name}" is larger than the ${maxBytes}-byte limit`, 'EFBIG');
    if (size > maxBytes) throw tooBig();
    // Read until EOF, not just fstat's size: a file that grows meanwhile still stops at the cap.
    const chunks: Buffer[] = [];
    let length = 0;
    for (;;) {
      const chunk = Buffer.alloc(Math.min(READ_CHUNK, maxBytes + 1 - length));
      const { bytesRead } = await fh.read(chunk, 0, chunk.length, length);
      if (bytesRead === 0) break;
      chunks.push(chunk.subarray(0, bytesRead));
      length += bytesRead;
      if (length > maxBytes) throw tooBig();
    }
    return Buffer.concat(chunks, length);
  } finally {
    await fh.close();
  }
}

/**
 * Creates `path` (or opens it for appending if it exists) without following a symlink there; it must
 * be a regular file. Returns true when the file was created. The parent directory must be trusted.
 */
export async function createFileNoFollow(path: string, mode: number): Promise<boolean> {
  let created = true;
  let fh: FileHandle;
  try {
    fh = await openNoFollow(path, O_WRONLY | O_APPEND | O_CREAT | constants.O_EXCL, mode);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    created = false;
    fh = await openNoFollow(path, O_WRONLY | O_APPEND);
  }
  try {
    await assertRegular(fh, path);
  } finally {
    await fh.close();
  }
  return created;
}

/** Throws FAILED_PRECONDITION for refused untrusted files, naming `what`; other errors pass. */
export function refuseUntrusted(err: unknown, what: string): never {
  if (err instanceof UntrustedFileError) throw failedPrecondition(`${what}: ${err.message}`, err);
  throw err;
}
