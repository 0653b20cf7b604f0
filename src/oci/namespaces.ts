/**
 * Linux namespaces of pause and app containers (containerd `WithPodNamespaces`, podsandbox
 * `sandboxContainerSpec`).
 *
 * Pause: new pid, ipc, uts, mount; network = the pinned netns; host network drops network and uts, host
 * PID drops pid, host IPC drops ipc; a user namespace (with the pod's id maps) when the pod has one.
 * App container: new mount; joins the pause process's network (or the pinned netns), ipc and uts unless
 * the pod uses the host's; pid per NamespaceMode (POD → pause's, CONTAINER → new, NODE → host,
 * TARGET → the target container's); a new cgroup namespace on cgroup v2 unless privileged; the pod's
 * user namespace when it has one.
 */
import { NamespaceMode, type IDMapping, type NamespaceOption } from '../gen/runtime/v1/api.js';
import { invalidArgument, internal } from '../common/errors.js';
import type { LinuxIDMapping, LinuxNamespace } from './types.js';
import { linuxOf, type SpecOpt } from './opts.js';

/** How a pod uses the host's namespaces, from its sandbox config's namespace options. */
export interface PodNamespaceModes {
  hostNetwork: boolean;
  hostPid: boolean;
  hostIpc: boolean;
  /** The pod has its own user namespace (userns_options mode POD). */
  userns: boolean;
  uidMappings: LinuxIDMapping[];
  gidMappings: LinuxIDMapping[];
}

/** Reads a sandbox's NamespaceOption (absent = all POD, no user namespace). */
export function podNamespaceModes(ns: NamespaceOption | undefined): PodNamespaceModes {
  const userns = ns?.usernsOptions;
  const own = userns?.mode === NamespaceMode.POD;
  if (userns && userns.mode !== NamespaceMode.POD && userns.mode !== NamespaceMode.NODE) {
    throw invalidArgument(`unsupported user namespace mode ${userns.mode}: want NODE or POD`);
  }
  if (own && (userns.uids.length === 0 || userns.gids.length === 0)) {
    throw invalidArgument('user namespace mode POD needs uid and gid mappings');
  }
  if (own) {
    checkIdMappings('uids', userns.uids);
    checkIdMappings('gids', userns.gids);
  }
  return {
    hostNetwork: ns?.network === NamespaceMode.NODE,
    hostPid: ns?.pid === NamespaceMode.NODE,
    hostIpc: ns?.ipc === NamespaceMode.NODE,
    userns: own,
    uidMappings: own ? userns.uids.map(idMapping) : [],
    gidMappings: own ? userns.gids.map(idMapping) : [],
  };
}

/** Mappings the kernel would take: non-empty ranges in 32 bits, disjoint on both sides, root mapped. */
function checkIdMappings(field: 'uids' | 'gids', mappings: IDMapping[]): void {
  const what = `linux.security_context.namespace_options.userns_options.${field}`;
  const MAX = 2 ** 32;
  mappings.forEach((m, i) => {
    if (m.length <= 0 || m.containerId + m.length > MAX || m.hostId + m.length > MAX) {
      throw invalidArgument(`${what}[${i}] (container_id ${m.containerId}, host_id ${m.hostId}, length ${m.length}) is not a range of 32-bit ids`);
    }
    for (const [j, other] of mappings.slice(0, i).entries()) {
      const overlaps = (a: number, b: number) => a < b + other.length && b < a + m.length;
      if (overlaps(m.containerId, other.containerId) || overlaps(m.hostId, other.hostId)) {
        throw invalidArgument(`${what}[${i}] overlaps ${field}[${j}]`);
      }
    }
  });
  if (!mappings.some((m) => m.containerId === 0)) throw invalidArgument(`${what} must map container id 0`);
}

function idMapping(m: IDMapping): LinuxIDMapping {
  return { containerID: m.containerId, hostID: m.hostId, size: m.length };
}

/**
 * The pause container's namespaces. `netnsPath` is the pinned network namespace (pod network only);
 * absent, the pause container gets a new one and the caller pins `/proc/<pid>/ns/net` afterwards.
 */
export function pauseNamespaces(modes: PodNamespaceModes, netnsPath: string | undefined): LinuxNamespace[] {
  const out: LinuxNamespace[] = [];
  if (!modes.hostPid) out.push({ type: 'pid' });
  if (!modes.hostIpc) out.push({ type: 'ipc' });
  if (!modes.hostNetwork) {
    out.push({ type: 'uts' });
    // Without a pinned netns runc makes a new one, owned by the pod's user namespace if it has one
    // (needed there: net.* sysctls cannot be written in a netns owned by the host's user namespace).
    out.push(netnsPath ? { type: 'network', path: netnsPath } : { type: 'network' });
  }
  out.push({ type: 'mount' });
  if (modes.userns) out.push({ type: 'user' });
  return out;
}

/** Where an app container finds the pod's namespaces. */
export interface PodNamespacePaths {
  /** PID of the running pause process: its /proc/<pid>/ns/* are joined. */
  pausePid: number;
  /** The pinned netns, preferred over /proc/<pausePid>/ns/net when given. */
  netnsPath?: string;
  /** PID of the target container's init for NamespaceMode TARGET. */
  targetPid?: number;
}

/** The app container's namespaces. `pidMode` is the container's own namespace_options.pid. */
export function containerNamespaces(
  modes: PodNamespaceModes,
  paths: PodNamespacePaths,
  pidMode: NamespaceMode,
  opts: { cgroupV2: boolean; privileged: boolean },
): LinuxNamespace[] {
  const proc = (kind: string, pid = paths.pausePid) => {
    if (!Number.isInteger(pid) || pid <= 0) throw internal(`cannot join the pod's ${kind} namespace: no pause process pid`);
    return `/proc/${pid}/ns/${kind}`;
  };
  const out: LinuxNamespace[] = [{ type: 'mount' }];
  if (!modes.hostNetwork) {
    out.push({ type: 'network', path: paths.netnsPath || proc('net') });
    out.push({ type: 'uts', path: proc('uts') });
  }
  if (!modes.hostIpc) out.push({ type: 'ipc', path: proc('ipc') });
  switch (pidMode) {
    case NamespaceMode.POD:
      // A pod with host PID has a pause process in the host's namespace: share that, i.e. no entry.
      if (!modes.hostPid) out.push({ type: 'pid', path: proc('pid') });
      break;
    case NamespaceMode.CONTAINER:
      out.push({ type: 'pid' });
      break;
    case NamespaceMode.NODE:
      break;
    case NamespaceMode.TARGET:
      if (!paths.targetPid) throw invalidArgument('namespace_options.pid is TARGET but the target container is not running');
      out.push({ type: 'pid', path: proc('pid', paths.targetPid) });
      break;
    default:
      throw invalidArgument(`unknown pid namespace mode ${pidMode}`);
  }
  if (opts.cgroupV2 && !opts.privileged) out.push({ type: 'cgroup' });
  if (modes.userns) out.push({ type: 'user', path: proc('user') });
  return out;
}

/** Sets the namespaces and, with a user namespace, the id maps. */
export const withNamespaces = (namespaces: LinuxNamespace[], modes: PodNamespaceModes): SpecOpt => (spec) => {
  const linux = linuxOf(spec);
  linux.namespaces = namespaces;
  if (modes.userns) {
    linux.uidMappings = modes.uidMappings.map((m) => ({ ...m }));
    linux.gidMappings = modes.gidMappings.map((m) => ({ ...m }));
  } else {
    delete linux.uidMappings;
    delete linux.gidMappings;
  }
};
