/**
 * The checkpoint archive: an uncompressed tar with the files CRI-O and containerd 2 put there, under
 * the names checkpointctl (`lib/metadata.go`) reads:
 *
 *   config.dump      container metadata (checkpointctl's ContainerConfig: id, name, image, runtime, times)
 *   spec.dump        the container's OCI spec (config.json) as it ran
 *   status           containerd's status document (created/started times, pid)
 *   checkpoint/      CRIU's image directory (inventory.img, pages-*.img, …)
 *   rootfs-diff.tar  files the container added or changed in its writable layer
 *   deleted.files    JSON list of paths it deleted from the image's files
 *   container.log    the CRI log as it was (containerd 2's name)
 *   dump.log, stats-dump   CRIU's log and statistics of the dump
 *
 * Every byte of an archive to restore is hostile: the entry rules and caps are here, the unpacking is
 * the image layer unpacker's (storage/extract.ts with an EntryPolicy).
 */
import { lstat } from 'node:fs/promises';
import { join } from 'node:path';
import { failedPrecondition } from '../common/errors.js';
import { readUntrustedFile, refuseUntrusted } from '../platform/safe-file.js';
import type { EntryPolicy } from '../storage/extract.js';

export const ARCHIVE_FILES = {
  configDump: 'config.dump',
  specDump: 'spec.dump',
  status: 'status',
  checkpointDir: 'checkpoint',
  rootfsDiff: 'rootfs-diff.tar',
  deletedFiles: 'deleted.files',
  containerLog: 'container.log',
  dumpLog: 'dump.log',
  statsDump: 'stats-dump',
} as const;

/** CRIU's file that every complete image directory has. */
const CRIU_INVENTORY = 'inventory.img';

/** The outer archive: regular files and directories only. */
export const ARCHIVE_POLICY: EntryPolicy = {
  what: 'checkpoint archive',
  refusedTypes: ['symlink', 'hardlink', 'char', 'block', 'fifo'],
  maxEntries: 100_000,
};

/** The writable layer's changes: what an image layer may hold, but no device nodes or FIFOs. */
export const ROOTFS_DIFF_POLICY: EntryPolicy = {
  what: 'root filesystem diff (rootfs-diff.tar) of the checkpoint archive',
  refusedTypes: ['char', 'block', 'fifo'],
  maxEntries: 1_000_000,
};

/** Caps on the metadata files read into memory. */
export const METADATA_LIMITS = {
  configDumpBytes: 1024 * 1024,
  specDumpBytes: 4 * 1024 * 1024,
  deletedFilesBytes: 16 * 1024 * 1024,
  deletedFiles: 100_000,
  pathBytes: 4096,
  processArgs: 4096,
  processEnv: 4096,
};

/** checkpointctl's ContainerConfig (`config.dump`; Go time.Time fields as RFC 3339). */
export interface ConfigDump {
  id: string;
  name: string;
  /** The image as the user asked for it. */
  rootfsImage?: string;
  /** The image ID. */
  rootfsImageRef?: string;
  /** The image's name. */
  rootfsImageName?: string;
  runtime?: string;
  createdTime: string;
  checkpointedTime: string;
  restoredTime: string;
  restored: boolean;
}

/** containerd's `status` file (checkpointctl's ContainerdStatus). */
export interface ContainerdStatus {
  CreatedAt: number;
  StartedAt: number;
  FinishedAt: number;
  ExitCode: number;
  Pid: number;
  Reason: string;
  Message: string;
}

/** What a restore takes from spec.dump: the process CRIU brings back. */
export interface DumpedProcess {
  args: string[];
  env: string[];
  cwd: string;
  terminal: boolean;
}

/** An unpacked archive's metadata, checked. */
export interface CheckpointMetadata {
  config: ConfigDump;
  process: DumpedProcess;
  /** Paths (relative to the root filesystem, normalised) the container had deleted. */
  deleted: string[];
  hasRootfsDiff: boolean;
  hasLog: boolean;
}

/** Go's zero time, which checkpointctl shows for a time never set. */
export const GO_ZERO_TIME = '0001-01-01T00:00:00Z';

/** Nanoseconds since the epoch as RFC 3339 with nanoseconds (Go's time.Time JSON). */
export function rfc3339Nano(ns: bigint): string {
  if (ns <= 0n) return GO_ZERO_TIME;
  const iso = new Date(Number(ns / 1_000_000n)).toISOString();
  return `${iso.slice(0, 19)}.${(ns % 1_000_000_000n).toString().padStart(9, '0')}Z`;
}

function refused(message: string): never {
  throw failedPrecondition(`checkpoint archive refused: ${message}`);
}

async function readJson(dir: string, name: string, maxBytes: number, required: boolean): Promise<unknown> {
  let bytes: Buffer;
  try {
    bytes = await readUntrustedFile(join(dir, name), maxBytes, name);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      if (required) refused(`it has no ${name}`);
      return undefined;
    }
    refuseUntrusted(err, 'checkpoint archive refused');
  }
  try {
    return JSON.parse(bytes.toString('utf8')) as unknown;
  } catch (err) {
    refused(`${name} is not valid JSON: ${(err as Error).message}`);
  }
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function optionalString(o: Record<string, unknown>, key: string, file: string): string | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string' || v.length > METADATA_LIMITS.pathBytes) refused(`${file}: "${key}" must be a string of at most ${METADATA_LIMITS.pathBytes} characters`);
  return v;
}

function stringArray(v: unknown, what: string, max: number): string[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || v.length > max || v.some((s) => typeof s !== 'string' || s.length > 65536)) {
    refused(`${what} must be a list of at most ${max} strings`);
  }
  return v as string[];
}

/** Checks config.dump's fields (unknown ones are ignored, as checkpointctl does). */
export function parseConfigDump(value: unknown): ConfigDump {
  if (!isRecord(value)) refused(`${ARCHIVE_FILES.configDump} must be a JSON object`);
  const s = (k: string) => optionalString(value, k, ARCHIVE_FILES.configDump);
  const image = { rootfsImage: s('rootfsImage'), rootfsImageRef: s('rootfsImageRef'), rootfsImageName: s('rootfsImageName') };
  if (!image.rootfsImage && !image.rootfsImageRef && !image.rootfsImageName) refused(`${ARCHIVE_FILES.configDump} names no image to restore onto`);
  return {
    id: s('id') ?? '',
    name: s('name') ?? '',
    ...image,
    runtime: s('runtime'),
    createdTime: s('createdTime') ?? GO_ZERO_TIME,
    checkpointedTime: s('checkpointedTime') ?? GO_ZERO_TIME,
    restoredTime: s('restoredTime') ?? GO_ZERO_TIME,
    restored: value['restored'] === true,
  };
}

/** The process of spec.dump (all a restore takes from it: mounts, namespaces and the rest come from the request). */
export function parseDumpedProcess(value: unknown): DumpedProcess {
  if (!isRecord(value) || !isRecord(value['process'])) refused(`${ARCHIVE_FILES.specDump} has no "process"`);
  const p = value['process'];
  const args = stringArray(p['args'], `${ARCHIVE_FILES.specDump} process.args`, METADATA_LIMITS.processArgs);
  if (args.length === 0) refused(`${ARCHIVE_FILES.specDump} process.args is empty`);
  const env = stringArray(p['env'], `${ARCHIVE_FILES.specDump} process.env`, METADATA_LIMITS.processEnv);
  const cwd = p['cwd'] ?? '/';
  if (typeof cwd !== 'string' || !cwd.startsWith('/') || cwd.length > METADATA_LIMITS.pathBytes) refused(`${ARCHIVE_FILES.specDump} process.cwd must be an absolute path`);
  return { args, env, cwd, terminal: p['terminal'] === true };
}

/**
 * A deleted path of deleted.files, relative to the root filesystem: `/a/b` or `a/b`, without `..`,
 * NUL or empty components, never the root itself.
 */
export function normaliseDeletedPath(path: string): string {
  if (path.length > METADATA_LIMITS.pathBytes || path.includes('\0')) refused(`${ARCHIVE_FILES.deletedFiles}: a path is longer than ${METADATA_LIMITS.pathBytes} bytes or holds a NUL byte`);
  const parts = path.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) refused(`${ARCHIVE_FILES.deletedFiles}: "${path}" contains ".."`);
  if (parts.length === 0) refused(`${ARCHIVE_FILES.deletedFiles}: "${path}" names the root`);
  return parts.join('/');
}

export function parseDeletedFiles(value: unknown): string[] {
  if (value === undefined || value === null) return [];
  return stringArray(value, ARCHIVE_FILES.deletedFiles, METADATA_LIMITS.deletedFiles).map(normaliseDeletedPath);
}

async function isRegularFile(path: string): Promise<boolean> {
  return (await lstat(path).catch(() => undefined))?.isFile() === true;
}

/** Reads and checks the metadata of an archive unpacked into `dir`. */
export async function readCheckpointMetadata(dir: string): Promise<CheckpointMetadata> {
  const config = parseConfigDump(await readJson(dir, ARCHIVE_FILES.configDump, METADATA_LIMITS.configDumpBytes, true));
  const process = parseDumpedProcess(await readJson(dir, ARCHIVE_FILES.specDump, METADATA_LIMITS.specDumpBytes, true));
  const deleted = parseDeletedFiles(await readJson(dir, ARCHIVE_FILES.deletedFiles, METADATA_LIMITS.deletedFilesBytes, false));
  if (!(await isRegularFile(join(dir, ARCHIVE_FILES.checkpointDir, CRIU_INVENTORY)))) {
    refused(`it holds no CRIU images (${ARCHIVE_FILES.checkpointDir}/${CRIU_INVENTORY})`);
  }
  return {
    config,
    process,
    deleted,
    hasRootfsDiff: await isRegularFile(join(dir, ARCHIVE_FILES.rootfsDiff)),
    hasLog: await isRegularFile(join(dir, ARCHIVE_FILES.containerLog)),
  };
}
