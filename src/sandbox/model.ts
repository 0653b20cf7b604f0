/**
 * A pod sandbox as Stove records it.
 *
 *   RunPodSandbox ──► READY ──StopPodSandbox──► NOTREADY ──RemovePodSandbox──► (gone)
 *                       │                          ▲
 *                       └── pause process exits ───┘
 *
 * The record is the truth: it is written before the API answers and read back at start-up, so pods
 * survive a restart of Stove. CRI messages are stored in their proto JSON form (int64 as strings).
 */

export type SandboxState = 'ready' | 'notready';

export interface SandboxRecord {
  id: string;
  /** Unique name derived from the metadata: `<name>_<namespace>_<uid>_<attempt>`. */
  name: string;
  /** PodSandboxConfig as proto JSON (PodSandboxConfig.toJSON). */
  config: unknown;
  runtimeHandler: string;
  createdAt: bigint;
  state: SandboxState;
  /** Pinned network namespace file; '' for host network. */
  netnsPath: string;
  /** Pod IPs, primary first. */
  ips: string[];
  /** cgroup parent the pod's containers go under. */
  cgroupParent: string;
  /** The pause container: its init pid and its conmon pid ('0' when not running). */
  pausePid: number;
  conmonPid: number;
  /** Pod files (hostname, resolv.conf, hosts, shm mount point). */
  files: { hostnamePath: string; resolvConfPath: string; hostsPath: string; shmPath: string };
  /** uid/gid mappings of the pod's user namespace, when it has one. */
  userns?: { uidMappings: IdMapping[]; gidMappings: IdMapping[] };
}

export interface IdMapping {
  containerId: number;
  hostId: number;
  size: number;
}

/** The unique name of a sandbox, as containerd builds it from the CRI metadata. */
export function sandboxName(meta: { name: string; namespace: string; uid: string; attempt: number }): string {
  return `${meta.name}_${meta.namespace}_${meta.uid}_${meta.attempt}`;
}
