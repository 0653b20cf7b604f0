/**
 * A container's CRI log file. Its path comes from the request (`log_path` under the pod's
 * `log_directory`), and the directory may hold entries a container wrote through a volume, so the path
 * must stay inside the log directory (`..` cannot leave it) and no symlink below the log directory is
 * followed: each directory is checked with lstat, the file is created with O_NOFOLLOW before conmon
 * opens it, and the directory's real path is compared at the end to catch a swap in between.
 */
import { lstat, mkdir, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import { dirname, isAbsolute, join, relative, sep } from 'node:path';
import type { ContainerConfig, PodSandboxConfig } from '../gen/runtime/v1/api.js';
import { failedPrecondition, invalidArgument } from '../common/errors.js';
import { createFileNoFollow, refuseUntrusted } from '../platform/safe-file.js';

/** The absolute CRI log path: the pod's log_directory joined with the container's log_path, inside it. */
export function logPathFor(podConfig: PodSandboxConfig, config: ContainerConfig): string {
  if (!config.logPath) return '';
  const dir = podConfig.logDirectory;
  if (!dir) {
    if (isAbsolute(config.logPath)) return config.logPath;
    throw invalidArgument(`config.log_path "${config.logPath}" is relative but the sandbox has no log_directory`);
  }
  const path = join(dir, config.logPath);
  const rel = relative(dir, path);
  if (rel === '' || rel === '..' || rel.startsWith('..' + sep) || isAbsolute(rel)) {
    throw invalidArgument(`config.log_path "${config.logPath}" leaves the sandbox's log_directory "${dir}"`);
  }
  return path;
}

/**
 * Creates the log file and the directories between `logDirectory` and it, following no symlink below
 * `logDirectory`. Returns what it created, deepest first, for the caller to remove on failure.
 */
export async function prepareLogFile(logDirectory: string, logPath: string): Promise<string[]> {
  const made: string[] = [];
  const parts = relative(logDirectory, logPath).split(sep);
  try {
    const first = await mkdir(logDirectory, { recursive: true, mode: 0o755 });
    if (first) made.push(first);
    let dir = logDirectory;
    for (const part of parts.slice(0, -1)) {
      dir = join(dir, part);
      try {
        await mkdir(dir, { mode: 0o755 });
        made.unshift(dir);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      if (!(await lstat(dir)).isDirectory()) throw failedPrecondition(`log path "${logPath}": "${dir}" is not a directory (symbolic links are not followed)`);
    }
    const created = await createFileNoFollow(logPath, 0o640).catch((err: unknown) => refuseUntrusted(err, `log path "${logPath}"`));
    if (created) made.unshift(logPath);
  } catch (err) {
    await removeMade(made);
    throw err;
  }
  // A directory swapped for a symlink after its lstat shows up here; nothing is removed through a path
  // that now leads elsewhere.
  const want = join(await realpath(logDirectory), ...parts.slice(0, -1));
  if ((await realpath(dirname(logPath))) !== want) {
    throw failedPrecondition(`log path "${logPath}": its directory changed while the file was created (symbolic links are not followed)`);
  }
  return made;
}

/** Removes what prepareLogFile made (deepest first); gone is fine. */
export async function removeMade(made: string[]): Promise<void> {
  for (const path of made) await rm(path, { recursive: true, force: true });
}

/**
 * The file in a container's bundle that names its log file, written before the log file is made: a
 * create interrupted (the daemon killed) before its record was written leaves a bundle without a
 * record, and recovery removes the log file it names (removeUnusedLogFile).
 */
const LOG_PATH_NOTE = 'log-path';

export async function noteLogPath(bundleDir: string, logPath: string): Promise<void> {
  await writeFile(join(bundleDir, LOG_PATH_NOTE), logPath, { mode: 0o600 });
}

/**
 * Removes the log file an interrupted create made, as its bundle's note names it, if it is still an
 * empty regular file (no process of the container ran to write to it) in a directory that is no
 * symlink; returns its path, or undefined when nothing was removed. A kubelet counts a restart for
 * every `<n>.log` it finds beside a container it does not know (its calcRestartCountByLogDir), so a
 * log file left by a create it never saw succeed would make its retry attempt 1, a restart of a
 * container that never ran.
 */
export async function removeUnusedLogFile(bundleDir: string): Promise<string | undefined> {
  const logPath = await readFile(join(bundleDir, LOG_PATH_NOTE), 'utf8').catch(() => '');
  if (!isAbsolute(logPath)) return undefined;
  const [file, dir] = await Promise.all([lstat(logPath).catch(() => undefined), lstat(dirname(logPath)).catch(() => undefined)]);
  if (!file?.isFile() || file.size > 0 || !dir?.isDirectory()) return undefined;
  await rm(logPath, { force: true });
  return logPath;
}
