/**
 * Mounts of an app container (containerd `withMounts`): the standard /proc, /dev, /sys…, the pod's
 * files (/etc/hostname, /etc/hosts, /etc/resolv.conf, /dev/shm) and the CRI mounts. A CRI mount
 * replaces any default or pod mount with the same destination, and a CRI mount of /dev replaces every
 * default mount under /dev. Bind mounts are added shallowest first so that none hides another.
 *
 * Host-side checks (creating missing host paths, resolving symlinks, propagation of the source mount)
 * happen before, in host-mounts.ts `prepareMounts`. The image's declared Volumes reach this file as CRI
 * mounts of per-container directories (container/declared-volumes.ts, `runtime.image_volumes = "copy"`,
 * containerd's default), behind the request's own. `selinux_relabel` is ignored: Stove runs on hosts
 * without SELinux (no mount label is set either).
 */
import { posix } from 'node:path';
import { MountPropagation, Mount as CriMount } from '../gen/runtime/v1/api.js';
import { invalidArgument } from '../common/errors.js';
import { cgroupMount, standardMounts, sysBindMount } from './defaults.js';
import type { Mount } from './types.js';
import { linuxOf, type SpecOpt } from './opts.js';

/** Pod-level files every app container gets unless a CRI mount already targets the path. */
export interface PodFiles {
  /** `<sandbox state dir>/hostname`. */
  hostnamePath?: string;
  /** The pod's hosts file; the kubelet usually sends its own /etc/hosts mount instead. */
  hostsPath?: string;
  resolvConfPath?: string;
  /** The pod's /dev/shm tmpfs, or `/dev/shm` itself for host-IPC pods. */
  shmPath?: string;
}

export interface MountOptions {
  privileged: boolean;
  /** The container is in a user namespace that does not own its network namespace: bind /sys. */
  bindSys: boolean;
  /** The runtime supports `rro` (runc ≥ 1.1 on Linux ≥ 5.12). */
  recursiveReadOnlySupported: boolean;
  /** Read-only root filesystem: the pod's /etc files are mounted read-only too. */
  readonlyRootfs: boolean;
}

/** The pod files as CRI-style mounts (so one code path turns everything into OCI mounts). */
export function podFileMounts(files: PodFiles, readonlyRootfs: boolean): CriMount[] {
  const out: CriMount[] = [];
  const add = (containerPath: string, hostPath: string | undefined, readonly: boolean) => {
    if (!hostPath) return;
    out.push(CriMount.fromPartial({ containerPath, hostPath, readonly, propagation: MountPropagation.PROPAGATION_PRIVATE }));
  };
  add('/etc/hostname', files.hostnamePath, readonlyRootfs);
  add('/etc/hosts', files.hostsPath, readonlyRootfs);
  add('/etc/resolv.conf', files.resolvConfPath, readonlyRootfs);
  add('/dev/shm', files.shmPath, false);
  return out;
}

/** CRI mounts plus the pod files they do not override, shallowest destination first (stable). */
export function mergeMounts(criMounts: readonly CriMount[], extra: readonly CriMount[]): CriMount[] {
  const taken = new Set(criMounts.map((m) => posix.normalize(m.containerPath)));
  const all = [...criMounts, ...extra.filter((e) => !taken.has(posix.normalize(e.containerPath)))];
  return all
    .map((m, i) => ({ m, i, depth: depthOf(m.containerPath) }))
    .sort((a, b) => a.depth - b.depth || a.i - b.i)
    .map((x) => x.m);
}

function depthOf(path: string): number {
  return posix.normalize(path).split('/').length - 1;
}

/** The OCI options for a CRI bind mount, and the rootfs propagation it needs. */
export function bindMountOptions(m: CriMount, rroSupported: boolean): { options: string[]; rootfsPropagation?: 'rslave' | 'rshared' } {
  const options = ['rbind'];
  let rootfsPropagation: 'rslave' | 'rshared' | undefined;
  switch (m.propagation) {
    case MountPropagation.PROPAGATION_HOST_TO_CONTAINER:
      options.push('rslave');
      rootfsPropagation = 'rslave';
      break;
    case MountPropagation.PROPAGATION_BIDIRECTIONAL:
      options.push('rshared');
      rootfsPropagation = 'rshared';
      break;
    default:
      options.push('rprivate');
  }
  if (m.readonly) {
    if (m.recursiveReadOnly) {
      if (!rroSupported) {
        throw invalidArgument(`runtime handler does not support recursive read-only mounts (hostPath="${m.hostPath}")`);
      }
      if (m.propagation !== MountPropagation.PROPAGATION_PRIVATE) {
        throw invalidArgument(`recursive read-only mount needs private propagation (hostPath="${m.hostPath}")`);
      }
      options.push('rro');
    } else {
      options.push('ro');
    }
  } else {
    if (m.recursiveReadOnly) throw invalidArgument(`recursive read-only mount conflicts with RW mount (hostPath="${m.hostPath}")`);
    options.push('rw');
  }
  // An image volume is read-only and never holds devices or set-user-ID programs; it may hold programs
  // to run (tools a platform injects): cri-api v0.36 no longer says noexec (kubernetes#135775).
  if (m.image?.image) options.push('nosuid', 'nodev');
  return { options, ...(rootfsPropagation ? { rootfsPropagation } : {}) };
}

/** One CRI mount as an OCI bind mount. */
export function ociBindMount(m: CriMount, rroSupported: boolean): { mount: Mount; rootfsPropagation?: 'rslave' | 'rshared' } {
  if (!m.containerPath.startsWith('/')) throw invalidArgument(`mount container_path "${m.containerPath}" must be absolute`);
  if (!m.hostPath) throw invalidArgument(`mount for "${m.containerPath}" has no host_path`);
  const { options, rootfsPropagation } = bindMountOptions(m, rroSupported);
  const mount: Mount = { destination: m.containerPath, type: 'bind', source: m.hostPath, options };
  if (m.uidMappings.length) mount.uidMappings = m.uidMappings.map((x) => ({ containerID: x.containerId, hostID: x.hostId, size: x.length }));
  if (m.gidMappings.length) mount.gidMappings = m.gidMappings.map((x) => ({ containerID: x.containerId, hostID: x.hostId, size: x.length }));
  return { mount, ...(rootfsPropagation ? { rootfsPropagation } : {}) };
}

/** The standard container mounts for these options (before CRI overrides). */
export function defaultContainerMounts(opts: Pick<MountOptions, 'privileged' | 'bindSys'>): Mount[] {
  const mounts = standardMounts().map((m) => (m.destination === '/sys' && opts.bindSys ? sysBindMount() : m));
  mounts.push(cgroupMount(opts.privileged));
  if (opts.privileged) {
    for (const m of mounts) {
      if (m.type === 'sysfs') m.options = [...(m.options ?? []).filter((option) => option !== 'ro'), 'rw'];
    }
  }
  return mounts;
}

/** Sets every mount of an app container; `criMounts` are the prepared CRI mounts. */
export const withContainerMounts = (criMounts: readonly CriMount[], files: PodFiles, opts: MountOptions): SpecOpt => (spec) => {
  const binds = mergeMounts(criMounts, podFileMounts(files, opts.readonlyRootfs));
  const destinations = new Set(binds.map((m) => posix.normalize(m.containerPath)));
  const replacesDev = destinations.has('/dev');
  const defaults = defaultContainerMounts(opts).filter((m) => {
    const dst = posix.normalize(m.destination);
    return !destinations.has(dst) && !(replacesDev && dst.startsWith('/dev/'));
  });
  const mounts = [...defaults];
  let propagation: 'rslave' | 'rshared' | undefined;
  for (const b of binds) {
    const { mount, rootfsPropagation } = ociBindMount(b, opts.recursiveReadOnlySupported);
    mounts.push(mount);
    if (rootfsPropagation === 'rshared' || (rootfsPropagation === 'rslave' && propagation !== 'rshared')) propagation = rootfsPropagation;
  }
  spec.mounts = mounts;
  if (propagation) linuxOf(spec).rootfsPropagation = propagation;
};
