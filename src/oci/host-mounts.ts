/**
 * Host-side preparation of CRI mounts, run before the pure builder (containerd `withMounts` does the same
 * checks inline): a missing host path is created as a directory (Docker's behaviour, kept: the kubelet
 * relies on it), symlinks in the host path are resolved, and the propagation a mount asks for must be
 * possible: `rshared` needs the source's mount to be shared, `rslave` needs it shared or slave
 * (/proc/self/mountinfo). Hosts with private root propagation, like this kind of machine, need
 * `mount --make-rshared` on the source first.
 */
import { mkdir, realpath, stat } from 'node:fs/promises';
import { MountPropagation, type Mount as CriMount } from '../gen/runtime/v1/api.js';
import { failedPrecondition, internal, invalidArgument, wrap } from '../common/errors.js';
import { mountContaining, propagationOf, readMountInfo, type MountInfo } from '../platform/proc.js';

/**
 * Returns copies of `mounts` with host paths created if missing and resolved through symlinks; throws
 * for a mount whose propagation the host cannot provide. `mountInfo` defaults to /proc/self/mountinfo.
 */
export async function prepareMounts(mounts: readonly CriMount[], mountInfo?: readonly MountInfo[]): Promise<CriMount[]> {
  const out: CriMount[] = [];
  let info = mountInfo;
  for (const m of mounts) {
    if (!m.containerPath.startsWith('/')) throw invalidArgument(`mounts: container_path "${m.containerPath}" must be an absolute path`);
    if (!m.hostPath) {
      // The container module mounts image volumes and names their source as host_path first.
      if (m.image?.image) throw internal(`mounts: image volume "${m.image.image}" for "${m.containerPath}" was not mounted`);
      throw invalidArgument(`mounts: host_path is empty for "${m.containerPath}"`);
    }
    await ensureHostPath(m.hostPath);
    let resolved: string;
    try {
      resolved = await realpath(m.hostPath);
    } catch (err) {
      throw wrap(err, `failed to resolve symlink "${m.hostPath}"`);
    }
    if (m.propagation === MountPropagation.PROPAGATION_BIDIRECTIONAL || m.propagation === MountPropagation.PROPAGATION_HOST_TO_CONTAINER) {
      info ??= await readMountInfo();
      checkPropagation(resolved, m.propagation, info);
    }
    out.push({ ...m, hostPath: resolved });
  }
  return out;
}

async function ensureHostPath(path: string): Promise<void> {
  try {
    await stat(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw wrap(err, `failed to stat "${path}"`);
    try {
      await mkdir(path, { recursive: true, mode: 0o755 });
    } catch (e) {
      throw wrap(e, `failed to mkdir "${path}"`);
    }
  }
}

/** Throws FailedPrecondition when the mount holding `path` cannot propagate as asked (pure). */
export function checkPropagation(path: string, propagation: MountPropagation, mounts: readonly MountInfo[]): void {
  const m = mountContaining(mounts, path);
  if (!m) throw failedPrecondition(`path "${path}" is not on any mount`);
  const kind = propagationOf(m);
  if (propagation === MountPropagation.PROPAGATION_BIDIRECTIONAL && kind !== 'shared') {
    throw failedPrecondition(`path "${path}" is mounted on "${m.mountPoint}" but it is not a shared mount (needed for Bidirectional propagation)`);
  }
  if (propagation === MountPropagation.PROPAGATION_HOST_TO_CONTAINER && kind === 'private') {
    throw failedPrecondition(`path "${path}" is mounted on "${m.mountPoint}" but it is not a shared or slave mount (needed for HostToContainer propagation)`);
  }
}
