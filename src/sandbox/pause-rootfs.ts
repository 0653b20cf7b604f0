/**
 * The pause root filesystem a daemon runs its pause containers from: a copy of the repo's `rootfs/pause`
 * (built by `make rootfs`) under the daemon's state dir. The copy, not the checkout, because a pod with
 * its own user namespace runs pause as an unprivileged host uid that must be able to reach its root: a
 * checkout under a 0700 directory (such as /root) would make every such pod fail with EACCES, while the
 * state dir and its parents are kept traversable for the same reason as containers' root filesystems.
 */
import { chmod, copyFile, mkdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { failedPrecondition } from '../common/errors.js';
import { PAUSE_ROOTFS } from '../oci/index.js';

/** Directories a pause root needs as mount points. */
const MOUNT_POINTS = ['dev', 'proc', 'sys', 'etc'];

/** Copies the built pause root into `<stateDir>/pause-rootfs` (replacing an older copy) and returns its path. */
export async function installPauseRootfs(stateDir: string, source = PAUSE_ROOTFS): Promise<string> {
  const binary = join(source, 'bin/pause');
  try {
    await stat(binary);
  } catch {
    throw failedPrecondition(`the pause program ${binary} is missing: run "make build" (or "make rootfs") first`);
  }
  const target = join(stateDir, 'pause-rootfs');
  const staging = `${target}.new`;
  await rm(staging, { recursive: true, force: true });
  await mkdir(join(staging, 'bin'), { recursive: true, mode: 0o755 });
  for (const dir of MOUNT_POINTS) await mkdir(join(staging, dir), { mode: 0o755 });
  await copyFile(binary, join(staging, 'bin/pause'));
  await chmod(join(staging, 'bin/pause'), 0o755);
  await chmod(staging, 0o755);
  await rm(target, { recursive: true, force: true });
  await rename(staging, target);
  return target;
}
