/**
 * Host device nodes for containers: the CRI's `devices` (a node or a directory of nodes) and, for
 * privileged containers, every device under /dev (containerd `WithDevices`, `WithHostDevices`).
 */
import { lstat, readdir, realpath, stat } from 'node:fs/promises';
import { posix } from 'node:path';
import type { Device } from '../gen/runtime/v1/api.js';
import { invalidArgument, wrap } from '../common/errors.js';
import { devicePermissions, type ResolvedDevice } from './devices.js';

/** Linux dev_t → major/minor (glibc's gnu_dev_major/minor). */
export function splitDevT(rdev: bigint): { major: number; minor: number } {
  const major = ((rdev >> 8n) & 0xfffn) | ((rdev >> 32n) & ~0xfffn & 0xffffffffn);
  const minor = (rdev & 0xffn) | ((rdev >> 12n) & ~0xffn & 0xffffffffn);
  return { major: Number(major), minor: Number(minor) };
}

/** The node at `hostPath` (not followed if a symlink), or undefined when it is not a device. */
async function deviceAt(hostPath: string, containerPath: string, permissions: string): Promise<ResolvedDevice | undefined> {
  const st = await lstat(hostPath, { bigint: true });
  const type = st.isCharacterDevice() ? 'c' : st.isBlockDevice() ? 'b' : st.isFIFO() ? 'p' : undefined;
  if (!type) return undefined;
  const { major, minor } = splitDevT(st.rdev);
  return {
    containerPath,
    hostPath,
    type,
    major,
    minor,
    fileMode: Number(st.mode & 0o777n),
    uid: Number(st.uid),
    gid: Number(st.gid),
    permissions,
  };
}

/**
 * Resolves CRI devices: symlinks in host_path are followed; a directory contributes every device node
 * below it (at the same relative path under container_path). Anything else is InvalidArgument.
 */
export async function resolveDevices(devices: readonly Device[]): Promise<ResolvedDevice[]> {
  const out: ResolvedDevice[] = [];
  for (const d of devices) {
    const permissions = devicePermissions(d.permissions, d.hostPath);
    const containerPath = d.containerPath || d.hostPath;
    if (!containerPath.startsWith('/')) throw invalidArgument(`devices: container_path "${d.containerPath}" must be absolute`);
    let host: string;
    try {
      host = await realpath(d.hostPath);
    } catch (err) {
      throw wrap(err, `devices: cannot use host_path "${d.hostPath}"`, 'InvalidArgument');
    }
    if ((await stat(host)).isDirectory()) {
      out.push(...(await devicesUnder(host, containerPath, permissions, new Set())));
      continue;
    }
    const dev = await deviceAt(host, containerPath, permissions);
    if (!dev) throw invalidArgument(`devices: host_path "${d.hostPath}" is not a device node`);
    out.push(dev);
  }
  return out;
}

/** Directories under /dev that hold no devices a container may take (containerd `getDevices`). */
const SKIPPED_DIRS = new Set(['pts', 'shm', 'fd', 'mqueue', '.lxc', '.lxd-mounts', '.udev']);

async function devicesUnder(hostDir: string, containerDir: string, permissions: string, skip: Set<string>): Promise<ResolvedDevice[]> {
  const out: ResolvedDevice[] = [];
  let entries;
  try {
    entries = await readdir(hostDir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries) {
    const host = posix.join(hostDir, e.name);
    const inContainer = posix.join(containerDir, e.name);
    if (e.isDirectory()) {
      if (!skip.has(e.name)) out.push(...(await devicesUnder(host, inContainer, permissions, skip)));
      continue;
    }
    // The console belongs to runc (it sets up /dev/console itself).
    if (e.name === 'console' && skip.size) continue;
    try {
      const dev = await deviceAt(host, inContainer, permissions);
      if (dev) out.push(dev);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
  return out;
}

/** Every device node under /dev for a privileged container, at the same paths. */
export async function listHostDevices(root = '/dev'): Promise<ResolvedDevice[]> {
  return devicesUnder(root, '/dev', 'rwm', SKIPPED_DIRS);
}
