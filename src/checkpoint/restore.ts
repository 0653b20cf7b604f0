/**
 * The restore side of a checkpoint archive (CRI-O's CRImportCheckpoint and ContainerRestore): unpack
 * the archive into the new container's private dir with the layer unpacker's checks, read its
 * metadata, and put the writable layer's changes onto the new container's root filesystem (the
 * deleted paths first, then rootfs-diff.tar, unpacked by the same unpacker into the mounted overlay,
 * so overlayfs copies up as for any write). The container's process is brought back by `runc restore`
 * under conmon when it starts (monitor/conmon.ts `restorePath`).
 */
import { constants, createReadStream } from 'node:fs';
import { lstat, mkdir, open, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { failedPrecondition } from '../common/errors.js';
import type { EntryPolicy } from '../storage/extract.js';
import { ARCHIVE_FILES, ARCHIVE_POLICY, ROOTFS_DIFF_POLICY, readCheckpointMetadata, type CheckpointMetadata } from './archive.js';

/** Unpacks a tar archive into an empty dir under a policy (the image service's unpacker). */
export type ArchiveUnpacker = (path: string, dir: string, policy: EntryPolicy) => Promise<void>;

/** Where a restoring container keeps the unpacked archive, in its persistent dir. */
export function restoreDirOf(persistDir: string): string {
  return join(persistDir, 'restore');
}

/** CRIU's images of an unpacked archive (conmon's `--restore` dir). */
export function criuImagesOf(restoreDir: string): string {
  return join(restoreDir, ARCHIVE_FILES.checkpointDir);
}

/** Unpacks the archive at `archive` (checked by location.ts) into `dir` (made here) and reads its metadata. */
export async function unpackCheckpoint(archive: string, dir: string, unpack: ArchiveUnpacker): Promise<CheckpointMetadata> {
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await unpack(archive, dir, ARCHIVE_POLICY);
  return readCheckpointMetadata(dir);
}

/**
 * Removes `rel` from the root filesystem when it is there, reached through real directories only (a
 * symlink on the way means the path is not the image's, so nothing is removed).
 */
async function removeInRootfs(rootfs: string, rel: string): Promise<void> {
  const parts = rel.split('/');
  let path = rootfs;
  for (const part of parts.slice(0, -1)) {
    path = join(path, part);
    const st = await lstat(path).catch(() => undefined);
    if (!st?.isDirectory()) return;
  }
  await rm(join(path, parts[parts.length - 1]!), { recursive: true, force: true });
}

/** Applies deleted.files, then rootfs-diff.tar, to the mounted root filesystem of the new container. */
export async function applyWritableLayer(rootfs: string, dir: string, metadata: CheckpointMetadata, unpack: ArchiveUnpacker): Promise<void> {
  for (const rel of metadata.deleted) await removeInRootfs(rootfs, rel);
  if (metadata.hasRootfsDiff) await unpack(join(dir, ARCHIVE_FILES.rootfsDiff), rootfs, ROOTFS_DIFF_POLICY);
}

/** The archived CRI log becomes the start of the new container's log (conmon appends to it). */
export async function restoreLog(dir: string, metadata: CheckpointMetadata, logPath: string): Promise<void> {
  if (!metadata.hasLog || !logPath) return;
  // The log file was just made (container/log-file.ts); it is appended to, never followed.
  const out = await open(logPath, constants.O_WRONLY | constants.O_APPEND | constants.O_NOFOLLOW);
  try {
    for await (const chunk of createReadStream(join(dir, ARCHIVE_FILES.containerLog)) as AsyncIterable<Buffer>) await out.write(chunk);
  } finally {
    await out.close();
  }
}

/** The spec annotation by which runc names a CRIU config file; its settings override runc's own. */
export const CRIU_CONFIG_ANNOTATION = 'org.criu.config';
const RESTORE_CRIU_CONFIG = 'criu-restore.conf';

/**
 * Writes CRIU's config for a restore into the unpacked archive's dir and returns its path, for the
 * restored container's spec (CRIU_CONFIG_ANNOTATION): `manage-cgroups=ignore`. runc puts CRIU into the
 * cgroup it made for the new container; in CRIU's default mode the restored tasks are then moved to the
 * cgroup paths recorded in its images, the checkpointed container's, while ignored they stay where they
 * are forked, in the new container's cgroup. runc 1.1.5 has no flag for the mode: the file is the way
 * in. It goes with the dir once the container runs, so a later checkpoint of it dumps as any other.
 */
export async function writeRestoreCriuConfig(dir: string): Promise<string> {
  const path = join(dir, RESTORE_CRIU_CONFIG);
  // O_EXCL: an archive entry of that name (a regular file or dir: the archive rules) is never reused.
  await writeFile(path, 'manage-cgroups=ignore\n', { mode: 0o600, flag: 'wx' }).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'EEXIST') throw failedPrecondition(`the checkpoint archive holds ${RESTORE_CRIU_CONFIG}, a name the restore keeps for CRIU's own config`);
    throw err;
  });
  return path;
}

/** Drops the unpacked archive once the container runs again (CRIU's images are no longer needed). */
export async function removeRestoreDir(persistDir: string): Promise<void> {
  await rm(restoreDirOf(persistDir), { recursive: true, force: true });
}
