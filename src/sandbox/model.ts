/**
 * A pod sandbox as Stove records it.
 *
 *   RunPodSandbox ──► READY ──StopPodSandbox──► NOTREADY ──RemovePodSandbox──► (gone)
 *                       │                          ▲
 *                       └── pause process exits ───┘
 *
 * The record is the truth: it is written before RunPodSandbox answers and on every change, and read
 * back at start-up, so pods survive a restart of Stove. The CRI config is stored in its proto JSON form
 * (int64 as strings); `podConfigOf` turns it back into the generated type.
 */
import { PodSandboxConfig } from '../gen/runtime/v1/api.js';
import type { PodFiles } from './pod-files.js';
import { hostIdOf, type IdRange } from '../storage/idshift.js';
import { oncePerObject } from '../common/memo.js';

export type SandboxState = 'ready' | 'notready';

/** A pod's pause process: running, exited, or deleted with its runtime container. */
export type PauseState = 'running' | 'stopped' | 'deleted';

/** Where a pod's containers find its namespaces; absent = the host's (or, for pid, a new one). */
export interface SandboxNamespaces {
  /** The pinned network namespace (pod network only). */
  network?: string;
  /** `/proc/<pausePid>/ns/ipc` unless the pod uses host IPC. */
  ipc?: string;
  /** `/proc/<pausePid>/ns/uts` unless the pod uses the host network. */
  uts?: string;
  /** `/proc/<pausePid>/ns/pid` unless the pod uses host PID (containers with pid mode POD join it). */
  pid?: string;
  /** `/proc/<pausePid>/ns/user` when the pod has its own user namespace. */
  user?: string;
}

/** One range of the pod's uid or gid map: the shape storage shifts file ownership by. */
export type IdMapping = IdRange;

export interface SandboxRecord {
  id: string;
  /** Unique name derived from the metadata: `<name>_<namespace>_<uid>_<attempt>`. */
  name: string;
  /** PodSandboxConfig as proto JSON (PodSandboxConfig.toJSON). */
  config: unknown;
  /** The runtime handler as requested ('' = the default, runc). */
  runtimeHandler: string;
  createdAt: bigint;
  state: SandboxState;
  /** The pod hostname (the node's when the config gave none). */
  hostname: string;
  /** Pinned network namespace file; '' for host network. */
  netnsPath: string;
  /** Pod IPs, primary first; empty for host network and once the network is torn down. */
  ips: string[];
  /** cgroup parent the pod's containers go under. */
  cgroupParent: string;
  /** The pause container's `linux.cgroupsPath` (`<parent>/<id>`, or `slice:stove:<id>`). */
  cgroupsPath: string;
  /**
   * Levels of the cgroup parent that did not exist before this pod (no kubelet made them), deepest
   * first: removing the pod removes them when they are empty.
   */
  createdCgroupParents: string[];
  /** The pause container's init pid and its /proc start time (0/0n when not running). */
  pausePid: number;
  pauseStartTime: bigint;
  /** The pause container's conmon and its /proc start time. */
  conmonPid: number;
  conmonStartTime: bigint;
  /** Paths of the pod's namespaces for containers to join. */
  namespaces: SandboxNamespaces;
  /** Pod files: hostname, resolv.conf, hosts, and the /dev/shm source (`/dev/shm` itself for host IPC). */
  files: PodFiles;
  /** The pod's volatile dir (pod files, shm mount, pause bundle). */
  stateDir: string;
  /** The pause container's OCI bundle (config.json). */
  bundleDir: string;
  /** uid/gid mappings of the pod's user namespace, when it has one. */
  userns?: { uidMappings: IdMapping[]; gidMappings: IdMapping[] };
  /** How the pause process ended (set once it has exited). */
  exit?: { code: number; finishedAt: bigint };
  /** The last in-place resize (UpdatePodSandboxResources), if any. */
  resize?: PodResizeRecord;
}

/** The unique name of a sandbox, as containerd builds it from the CRI metadata. */
export function sandboxName(meta: { name: string; namespace: string; uid: string; attempt: number }): string {
  return `${meta.name}_${meta.namespace}_${meta.uid}_${meta.attempt}`;
}

/** The record's pod config, parsed once per record object (callers must not modify it). */
export const podConfigOf = oncePerObject((record: Pick<SandboxRecord, 'config'>): PodSandboxConfig => PodSandboxConfig.fromJSON(record.config));

/**
 * The host gid of a user-namespaced pod's root (in-namespace gid 0), which may pass through the pod's
 * and its containers' volatile dirs (persist/tree-modes.ts); undefined for a pod without one.
 */
export function podRootGid(userns: SandboxRecord['userns']): number | undefined {
  return userns ? hostIdOf(userns.gidMappings, 0) : undefined;
}

/** True while the pause process should be running. */
export function isReady(record: Pick<SandboxRecord, 'state'>): boolean {
  return record.state === 'ready';
}

/** What the record keeps of the last resize. */
export interface PodResizeRecord {
  /** The cgroup written (absolute cgroup path). */
  cgroup: string;
  /** The pod-level limits applied: resources plus overhead. */
  limits: unknown;
  /** When (RFC 3339). */
  at: string;
}
