/**
 * CheckpointContainer's work, CRI-O's steps (internal/lib/checkpoint.go): pause the container (so its
 * files match its memory), `runc checkpoint --leave-running` into a work dir, write the metadata and
 * the writable layer's changes, resume, then tar the work dir into a temp file beside the target and
 * rename it there. A failure or a timeout leaves no archive (nor a partial one) and the container
 * running; the work dir goes either way. Everything runs within the request's deadline.
 */
import { copyFile, open, rename, rm, writeFile, mkdir, lstat } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { basename, dirname, join } from 'node:path';
import { StoveError, internal, messageOf } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import { runCommand, commandFailure } from '../platform/processes.js';
import type { Runc } from '../runtime/runc.js';
import { ARCHIVE_FILES, type ConfigDump, type ContainerdStatus } from './archive.js';
import { writableLayerChanges } from './layer-diff.js';

export interface CheckpointJob {
  id: string;
  runtime: Runc;
  /** The bundle's config.json becomes spec.dump. */
  bundleDir: string;
  /** The overlay upper dir (the writable layer). */
  upperDir: string;
  /** The CRI log ('' = none). */
  logPath: string;
  /** A private scratch dir (removed before and after). */
  workDir: string;
  /** The archive's path, checked (location.ts). */
  target: string;
  /** Milliseconds since the epoch by which the archive must exist. */
  deadline: number;
  configDump: ConfigDump;
  status: ContainerdStatus;
  /** The spec's mount destinations, left out of the layer's changes. */
  mountPoints: string[];
  log: Logger;
}

/** Bytes of tar(1)'s own messages kept. */
const TAR_OUTPUT = 64 * 1024;

function deadlineError(job: CheckpointJob, step: string): StoveError {
  return new StoveError('DeadlineExceeded', `checkpoint of container "${job.id}" ran out of time during ${step}: raise the request's timeout`);
}

/** Milliseconds left, or DEADLINE_EXCEEDED naming the step about to start. */
function remaining(job: CheckpointJob, step: string): number {
  const left = job.deadline - Date.now();
  if (left <= 0) throw deadlineError(job, step);
  return left;
}

/** Runs tar(1) over trusted input (Stove's own work dir and the container's upper dir, never followed). */
async function tar(job: CheckpointJob, step: string, args: string[], input?: string): Promise<void> {
  const r = await runCommand('tar', { args, input, timeoutMs: remaining(job, step), maxOutputBytes: TAR_OUTPUT, env: { ...process.env, LC_ALL: 'C' } });
  if (r.timedOut) throw deadlineError(job, step);
  if (r.exitCode !== 0) throw internal(`checkpoint of container "${job.id}": ${step} failed: tar: ${commandFailure(r)}`);
}

/** The writable layer's changes: rootfs-diff.tar and deleted.files in the work dir. */
async function writeLayerChanges(job: CheckpointJob): Promise<void> {
  const changes = await writableLayerChanges(job.upperDir, job.mountPoints);
  await writeFile(join(job.workDir, ARCHIVE_FILES.deletedFiles), JSON.stringify(changes.deleted), { mode: 0o600 });
  const list = changes.changed.map((p) => `${p}\0`).join('');
  // --no-recursion: the list names every entry (parents first); nothing below a mount point is walked.
  await tar(
    job,
    'writing the writable layer (rootfs-diff.tar)',
    ['--create', '--file', join(job.workDir, ARCHIVE_FILES.rootfsDiff), '--directory', job.upperDir, '--no-recursion', '--numeric-owner', '--null', '--files-from=-'],
    list,
  );
}

async function writeMetadata(job: CheckpointJob): Promise<void> {
  const w = (name: string, value: unknown) => writeFile(join(job.workDir, name), JSON.stringify(value, null, 2), { mode: 0o600 });
  await Promise.all([
    w(ARCHIVE_FILES.configDump, job.configDump),
    w(ARCHIVE_FILES.status, job.status),
    copyFile(join(job.bundleDir, 'config.json'), join(job.workDir, ARCHIVE_FILES.specDump)),
    job.logPath ? copyFile(job.logPath, join(job.workDir, ARCHIVE_FILES.containerLog)).catch(ignoreMissing) : undefined,
  ]);
}

function ignoreMissing(err: unknown): void {
  if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
}

/** The paused part: CRIU's dump, the metadata, the layer's changes. */
async function dumpPaused(job: CheckpointJob): Promise<void> {
  const imagePath = join(job.workDir, ARCHIVE_FILES.checkpointDir);
  await mkdir(imagePath, { mode: 0o700 });
  const timeoutMs = remaining(job, 'runc checkpoint');
  try {
    await job.runtime.checkpoint(job.id, { imagePath, workPath: job.workDir, leaveRunning: true, timeoutMs });
  } catch (err) {
    if (err instanceof StoveError && err.kind === 'DeadlineExceeded') throw deadlineError(job, 'runc checkpoint');
    // CRIU's own account of why is the end of dump.log.
    const criuLog = await tailOf(join(job.workDir, ARCHIVE_FILES.dumpLog));
    throw new StoveError(err instanceof StoveError ? err.kind : 'Internal', `${messageOf(err)}${criuLog ? ` (CRIU's dump.log ends: ${criuLog})` : ''}`, { cause: err });
  }
  await writeMetadata(job);
  await writeLayerChanges(job);
}

async function tailOf(path: string): Promise<string> {
  const fh = await open(path, 'r').catch(() => undefined);
  if (!fh) return '';
  try {
    const { size } = await fh.stat();
    const length = Math.min(size, 2048);
    const buf = Buffer.alloc(length);
    await fh.read(buf, 0, length, size - length);
    return buf.toString('utf8').trim().split('\n').slice(-4).join(' | ');
  } finally {
    await fh.close();
  }
}

/** Tars the work dir into a 0600 temp file beside the target, fsyncs it and renames it into place. */
async function publish(job: CheckpointJob): Promise<void> {
  const names: string[] = [];
  for (const name of Object.values(ARCHIVE_FILES)) if (await lstat(join(job.workDir, name)).catch(() => undefined)) names.push(name);
  const temp = join(dirname(job.target), `.${basename(job.target)}.${randomBytes(6).toString('hex')}.tmp`);
  const fh = await open(temp, 'wx', 0o600);
  await fh.close();
  try {
    await tar(job, 'writing the archive', ['--create', '--file', temp, '--directory', job.workDir, '--numeric-owner', '--owner=0', '--group=0', '--', ...names]);
    const written = await open(temp, 'r+');
    try {
      await written.sync();
    } finally {
      await written.close();
    }
    remaining(job, 'renaming the archive into place');
    await rename(temp, job.target);
  } catch (err) {
    await rm(temp, { force: true });
    throw err;
  }
}

/** Writes the checkpoint archive of a running container; it keeps running whatever happens. */
export async function writeCheckpointArchive(job: CheckpointJob): Promise<void> {
  await rm(job.workDir, { recursive: true, force: true });
  await mkdir(job.workDir, { recursive: true, mode: 0o700 });
  try {
    await job.runtime.pause(job.id);
    try {
      await dumpPaused(job);
    } finally {
      await job.runtime.resume(job.id).catch((err: unknown) => job.log.error('cannot resume a container after its checkpoint', { id: job.id, error: messageOf(err) }));
    }
    await publish(job);
  } finally {
    await rm(job.workDir, { recursive: true, force: true });
  }
}
