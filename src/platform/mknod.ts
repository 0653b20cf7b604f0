/**
 * Device nodes and fifos (Node has no mknod(2)): through the mount helper, or coreutils `mknod` when
 * the helper is not built.
 */
import { getSystemErrorName } from 'node:util';
import { mountHelper, SyscallError } from './mount-helper.js';
import { commandFailure, runCommand } from './processes.js';
import { internal } from '../common/errors.js';

export interface NodeSpec {
  /** Char device, block device or fifo. */
  type: 'c' | 'b' | 'p';
  /** Permission bits, set exactly (the umask does not apply). */
  mode: number;
  major: number;
  minor: number;
}

/** `mknod` has no business running longer than this. */
const MKNOD_TIMEOUT_MS = 30_000;

/**
 * Creates the node at `path` (which must not exist); throws an Error quoting the system's message, with
 * the errno's `code` (EEXIST, ENOSPC, …) when the system call failed.
 */
export async function makeNode(path: string, node: NodeSpec): Promise<void> {
  const helper = mountHelper();
  if (helper) {
    await helper.mknod(path, node.type, node.mode & 0o7777, node.major, node.minor).catch((err: Error) => {
      if (!(err instanceof SyscallError)) throw internal(`mknod ${path}: ${err.message}`, err);
      throw Object.assign(new Error(`mknod ${path}: ${err.text}`, { cause: err }), { code: getSystemErrorName(-err.errno) });
    });
    return;
  }
  // mknod(1) -m takes permission bits only; the special bits are left to the caller's chmod.
  const args = ['-m', (node.mode & 0o777).toString(8), path, node.type];
  if (node.type !== 'p') args.push(String(node.major), String(node.minor));
  const r = await runCommand('mknod', { args, timeoutMs: MKNOD_TIMEOUT_MS, maxOutputBytes: 64 * 1024 });
  if (r.exitCode !== 0) throw internal(`mknod ${path}: ${commandFailure(r)}`);
}
