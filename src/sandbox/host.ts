/**
 * The host-side steps of a pod that need root (the shm tmpfs, cgroup directories, sysctls of a pinned
 * netns), behind one interface so the sandbox service can be unit-tested without root.
 */
import { access, readdir, readFile, rmdir } from 'node:fs/promises';
import { posix } from 'node:path';
import type { DNSConfig } from '../gen/runtime/v1/api.js';
import { internal } from '../common/errors.js';
import { execInNetns } from '../network/netns-exec.js';
import { cgroupParentPath, cgroupPathOf, detectCgroups, dirIn, removeCgroup } from '../platform/cgroups.js';
import { commandFailure, runCommand } from '../platform/processes.js';
import { mountPodShm, removePodFiles, unmountPodShm, writePodFiles, type PodFiles } from './pod-files.js';
import { assertSearchableByOthers } from '../platform/searchable.js';
import { writeCgroupLimits, type CgroupWrite } from './cgroup-limits.js';
import type { LinuxResources } from '../oci/index.js';

export interface SandboxHost {
  writePodFiles(files: PodFiles, hostname: string, dns: DNSConfig | undefined): Promise<void>;
  mountShm(files: PodFiles): Promise<void>;
  unmountShm(files: PodFiles): Promise<void>;
  removePodFiles(files: PodFiles): Promise<void>;
  /**
   * The levels of a cgroup parent that do not exist yet, as cgroup paths, deepest first (`/a/b` with
   * only `/a` present → [`/a/b`]; a slice `a-b.slice` with only `a.slice` → [`/a.slice/a-b.slice`]).
   */
  missingCgroupLevels(parent: string): Promise<string[]>;
  /** Removes a container cgroup and everything below it; missing is fine. */
  removeCgroup(cgroupsPath: string): Promise<void>;
  /**
   * Removes one cgroup level if it is empty (never recursively: other pods may live below it); a
   * slice's level is stopped through systemd, which owns it.
   */
  removeEmptyCgroup(path: string): Promise<void>;
  /** Writes sysctls (dotted names) inside the network namespace pinned at `netnsPath`. */
  writeNetnsSysctls(netnsPath: string, sysctls: Record<string, string>): Promise<void>;
  /** Fails, naming the directory, when an unprivileged uid could not reach `path` (user-namespace pods). */
  assertSearchableByOthers(path: string, what: string): Promise<void>;
  /** Writes limits into an existing cgroup (absolute cgroup path); returns what was written. */
  writeCgroupLimits(path: string, limits: LinuxResources): Promise<CgroupWrite[]>;
}

/** `net.ipv4.conf.eth0/100.rp_filter` → `net/ipv4/conf/eth0.100/rp_filter` (dots and slashes swap). */
export function sysctlPath(name: string): string {
  return `/proc/sys/${name.replace(/[./]/g, (c) => (c === '.' ? '/' : '.'))}`;
}

const exists = (path: string) => access(path).then(() => true, () => false);

/** The real host: util-linux mount and the cgroup filesystems. */
export class LinuxSandboxHost implements SandboxHost {
  assertSearchableByOthers = assertSearchableByOthers;
  writePodFiles = writePodFiles;
  mountShm = mountPodShm;
  unmountShm = unmountPodShm;
  removePodFiles = removePodFiles;

  async missingCgroupLevels(parent: string): Promise<string[]> {
    const layout = await detectCgroups();
    const probe = layout.hierarchies.find((h) => h.version === layout.version);
    if (!probe) return [];
    const missing: string[] = [];
    for (let path = cgroupParentPath(parent); path !== '/'; path = posix.dirname(path)) {
      if (await exists(dirIn(probe, path))) break;
      missing.push(path);
    }
    return missing;
  }

  async removeCgroup(cgroupsPath: string): Promise<void> {
    await removeCgroup(await detectCgroups(), cgroupsPath);
  }

  async writeCgroupLimits(path: string, limits: LinuxResources): Promise<CgroupWrite[]> {
    return writeCgroupLimits(await detectCgroups(), path, limits);
  }

  async writeNetnsSysctls(netnsPath: string, sysctls: Record<string, string>): Promise<void> {
    const entries = Object.entries(sysctls);
    if (entries.length === 0) return;
    // /proc/sys/net shows the network namespace of the process that opens it: one shell inside it
    // writes them all (paths and values as arguments, never parsed by the shell).
    const script = 'while [ $# -gt 0 ]; do printf "%s" "$2" > "$1" || exit 1; shift 2; done';
    const r = await execInNetns(netnsPath, ['sh', '-c', script, 'sh', ...entries.flatMap(([k, v]) => [sysctlPath(k), v])], { timeoutMs: 10_000 });
    if (r.exitCode !== 0) throw internal(`failed to set sysctls ${entries.map(([k]) => k).join(', ')}: ${r.stderr.trim()}`);
  }

  async removeEmptyCgroup(path: string): Promise<void> {
    const layout = await detectCgroups();
    const slice = posix.basename(path);
    if (slice.endsWith('.slice')) return stopEmptySlice(slice, dirIn(layout.hierarchies.find((h) => h.version === layout.version)!, path));
    const dirs = new Set(layout.hierarchies.map((h) => dirIn(h, cgroupPathOf(path))));
    await Promise.all(
      [...dirs].map((d) =>
        rmdir(d).catch((err: NodeJS.ErrnoException) => {
          if (!['ENOENT', 'EBUSY', 'ENOTEMPTY'].includes(err.code ?? '')) throw err;
        }),
      ),
    );
  }
}

/**
 * Stops a slice unit that runc had systemd start for a pod (systemd keeps an empty slice active, and its
 * cgroup, until it is stopped). Stopping a slice stops every unit in it, so one that holds anything
 * (a scope or process that came after the pod's) is left alone.
 */
async function stopEmptySlice(unit: string, dir: string): Promise<void> {
  const children = await readdir(dir, { withFileTypes: true }).catch(() => undefined);
  if (!children) return; // gone already
  const procs = (await readFile(posix.join(dir, 'cgroup.procs'), 'utf8').catch(() => '')).trim();
  if (procs || children.some((e) => e.isDirectory())) return;
  const r = await runCommand('systemctl', { args: ['stop', unit], timeoutMs: 30_000, maxOutputBytes: 64 * 1024 });
  if (r.exitCode !== 0) throw internal(`failed to stop systemd slice ${unit}: ${commandFailure(r)}`);
}
