/**
 * A container as Stove records it.
 *
 *   CreateContainer ──► CREATED ──StartContainer──► RUNNING ──(process exits / StopContainer)──► EXITED
 *                          │                                                                     │
 *                          └──────────── start fails (StartError) or the process dies ──────────┘
 *   RemoveContainer from any state (a running container is killed first) ──► (gone)
 *
 * The record is the truth: written atomically before CreateContainer answers and on every change,
 * read back at start-up. The CRI config is stored as proto JSON (int64 as strings); `containerConfigOf`
 * turns it back into the generated type. The OCI spec lives in the bundle (`config.json`); the record
 * keeps its `process` so ExecSync needs no file read.
 */
import { ContainerConfig, LinuxContainerResources } from '../gen/runtime/v1/api.js';
import type { ExitReason } from '../monitor/exits.js';
import { oncePerObject } from '../common/memo.js';

export type ContainerStateName = 'created' | 'running' | 'exited';

/** Why a container is EXITED when no process exit explains it. */
export type SyntheticReason = 'StartError' | 'Unknown';

export interface ContainerUserRecord {
  uid: number;
  gid: number;
  /** Supplementary groups as the process has them (primary gid included). */
  additionalGids: number[];
}

export interface ContainerRecord {
  id: string;
  /** Unique name: `<name>_<pod name>_<pod namespace>_<pod uid>_<attempt>` (containerd's). */
  name: string;
  sandboxId: string;
  /** ContainerConfig as proto JSON (ContainerConfig.toJSON). */
  config: unknown;
  /** The runtime handler of the pod ('' = runc). */
  runtimeHandler: string;
  /** The image as the request named it. */
  image: string;
  /** The image ID (`sha256:…`). */
  imageId: string;
  /** What ContainerStatus reports as image_ref: the first repo digest, else the image ID. */
  imageRef: string;
  /** Canonical name of the first signal StopContainer sends (stop-signal.ts; '' in older records = SIGTERM). */
  stopSignal: string;
  /** Absolute CRI log path ('' = no log). */
  logPath: string;
  state: ContainerStateName;
  createdAt: bigint;
  /**
   * The pod cgroup's OOM kill count just before the container started (absent when it could
   * not be read, and in records from before it was kept): an exit by SIGKILL after it grew was an OOM
   * kill when the container's own cgroup is gone.
   */
  parentOomKillsAtStart?: bigint;
  startedAt: bigint;
  finishedAt: bigint;
  exitCode: number;
  reason: '' | ExitReason | SyntheticReason;
  message: string;
  /** Container init pid and its /proc start time (0 when not running). */
  pid: number;
  pidStartTime: bigint;
  /** conmon, re-parented to init, and its /proc start time. */
  conmonPid: number;
  conmonStartTime: bigint;
  /** OCI bundle: config.json, conmon's files; `rootfs` below it is the overlay mount point. */
  bundleDir: string;
  rootfsDir: string;
  /** Where conmon writes `exit` and `oom` (the container's persistent dir). */
  persistDir: string;
  /** `linux.cgroupsPath` of the spec. */
  cgroupsPath: string;
  /** The container has no PID namespace of its own (it shares the pod's or the host's). */
  sharedPidNamespace: boolean;
  /** Current resources as proto JSON (LinuxContainerResources.toJSON); updated by UpdateContainerResources. */
  resources: unknown;
  /** The effective user. */
  user: ContainerUserRecord;
  /** The spec's `process`: the template for ExecSync and streaming exec. */
  process: Record<string, unknown>;
  /** The image volumes mounted for it (absent: none). */
  imageVolumes?: ImageVolumeRecord[];
  /** What the spec editors applied, by key (`cdiDevices`, `ociHooks`); absent when nothing. */
  specEdits?: Record<string, unknown>;
  /**
   * Created from a checkpoint archive or checkpoint image (absent: from an image). While CREATED the unpacked archive
   * waits in `<persistDir>/restore`; StartContainer restores the process from it.
   */
  restore?: RestoreRecord;
}

export interface RestoreRecord {
  /** The archive's path, or the checkpoint image, as the request named it. */
  archive: string;
  /** When the checkpoint was taken (config.dump's checkpointedTime, RFC 3339). */
  checkpointedAt: string;
}

/** The unique name of a container, as containerd builds it from the CRI metadata. */
export function containerName(
  meta: { name: string; attempt: number },
  pod: { name: string; namespace: string; uid: string },
): string {
  return [meta.name, pod.name, pod.namespace, pod.uid, String(meta.attempt)].join('_');
}

/** The CRI config a record was created from, parsed once per record object (callers must not modify it). */
export const containerConfigOf = oncePerObject((record: Pick<ContainerRecord, 'config'>): ContainerConfig => ContainerConfig.fromJSON(record.config));

/** The record's current resources. */
export function resourcesOf(record: Pick<ContainerRecord, 'resources'>): LinuxContainerResources | undefined {
  return record.resources === undefined || record.resources === null ? undefined : LinuxContainerResources.fromJSON(record.resources);
}

/** What a container's record keeps of one image volume. */
export interface ImageVolumeRecord {
  /** Index of the mount in the request's `mounts`. */
  mount: number;
  /** The image as the request named it. */
  image: string;
  imageId: string;
  /** The repo digest (else the ID), as ContainerStatus.image_ref. */
  imageRef: string;
  subPath: string;
  /** The host path bound into the container (the mount or the sub path inside it). */
  source: string;
}
