/**
 * What the container service needs from the rest of Stove, as narrow interfaces: the daemon passes the
 * real services, unit tests pass fakes.
 */
import type { ContainerConfig, LinuxContainerResources } from '../gen/runtime/v1/api.js';
import type { ContainerRecord } from './model.js';
import type { Logger } from '../common/logger.js';
import type { Telemetry } from '../observability/hooks.js';
import type { ImageStores } from '../images/image-stores.js';
import type { Monitor } from '../monitor/monitor.js';
import type { CgroupLayout } from '../platform/cgroups.js';
import type { Runc } from '../runtime/runc.js';
import type { SandboxRecord } from '../sandbox/model.js';
import type { Spec, SpecSettings } from '../oci/index.js';
import type { RuntimeSupport } from '../cdi/index.js';
import type { SpecEditor } from './spec-editors.js';
import type { ContainerStore } from './store.js';
import type { CriuProbe } from '../checkpoint/criu.js';

/** A container's or a pod's lifecycle event (GetContainerEvents' four kinds). */
export type LifecycleEventType = 'created' | 'started' | 'stopped' | 'deleted';

/** Where a container's lifecycle events go (the one publisher, pod/events.ts). */
export interface ContainerEvents {
  /** A container's lifecycle event (`deleted`: the container is gone and not among the pod's containers). */
  container(type: LifecycleEventType, record: ContainerRecord, deleted?: boolean): void;
}

/** Sandbox lookups (the sandbox service). */
export interface SandboxLookup {
  /** The sandbox with this ID or unique ID prefix, or undefined. */
  find(idOrPrefix: string): SandboxRecord | undefined;
  list(): SandboxRecord[];
}

/**
 * What containers need from the image stores (images/image-stores.ts): the image calls name the pod's
 * runtime handler, whose store holds the container's images; the others go by container ID.
 */
export type ContainerImages = Pick<
  ImageStores,
  'getImage' | 'manifestFacts' | 'hasOwnStore' | 'mountRootfs' | 'mountImageVolume' | 'declaredVolumesDir' | 'removeRootfs' | 'rootfsUsage' | 'heldImage' | 'holdImage' | 'holders' | 'unpackArchive' | 'upperDirOf'
>;

/** The OCI runtime for a pod's runtime handler ('' = runc). */
export interface RuntimeLookup {
  get(handler: string): Runc;
}

/**
 * Extensions of the container lifecycle (NRI plugins, docs/nri.md). The awaited calls may change the
 * container and bound their own time; the notifications go out in order and never fail a CRI call.
 */
export interface ContainerLifecycle {
  /**
   * The finished OCI spec of a container being created, to adjust in place; a throw fails the create.
   * Returns the container's resources as the record keeps them when the adjustment changed any.
   * `runtime`: what the container's OCI runtime implements (its `features`).
   */
  adjustSpec(c: { id: string; sandbox: SandboxRecord; config: ContainerConfig; spec: Spec; runtime?: () => Promise<RuntimeSupport> }): Promise<LinuxContainerResources | undefined>;
  /** Just before the container's process starts. */
  starting(record: ContainerRecord): Promise<void>;
  /** The resources an UpdateContainerResources will apply, for extensions to change; returns them. */
  updating(record: ContainerRecord, resources: LinuxContainerResources): Promise<LinuxContainerResources>;
  /** After the fact. */
  containerEvent(event: 'created' | 'started' | 'updated' | 'stopped' | 'removed', record: ContainerRecord): void;
  podEvent(event: 'started' | 'stopped' | 'removed', sandboxId: string): void;
}

/** Extensions of UpdatePodSandboxResources (NRI plugins, docs/nri.md). */
export interface PodResizeExtensions {
  /** Before the new limits are written; a throw fails the call and nothing is changed. */
  updatingPod(record: SandboxRecord, overhead: LinuxContainerResources | undefined, resources: LinuxContainerResources | undefined): Promise<void>;
  /** After the fact (never fails). */
  podUpdated(record: SandboxRecord): void;
}

/** Checkpoint and restore (CheckpointContainer; CreateContainer from an archive). */
export interface CheckpointSettings {
  /** Directories archives may be written to and restored from (runtime.checkpoint_dirs, `<root>/checkpoints`). */
  dirs: string[];
  /** FAILED_PRECONDITION unless CRIU works on this node. */
  criu: Pick<CriuProbe, 'require'>;
  /** Metadata written into config.dump. */
  runtimeName: string;
}

export interface ContainerServiceOptions {
  store: ContainerStore;
  sandboxes: SandboxLookup;
  images: ContainerImages;
  monitor: Monitor;
  runtimes: RuntimeLookup;
  specSettings: SpecSettings;
  /** Applied to each built container spec in order (CDI devices, OCI hooks); none when absent. */
  specEditors?: readonly SpecEditor[];
  cgroups: CgroupLayout;
  /** Per-container persistent dir (records, overlay upper/work, conmon's persist dir). */
  containerDir(id: string): string;
  /** Per-container volatile dir: the OCI bundle and the rootfs mount point. */
  containerStateDir(id: string): string;
  /** Where the container's lifecycle events go (pod/events.ts). */
  events: ContainerEvents;
  /** conmon's `--log-size-max` for CRI logs, in bytes; unlimited when omitted or negative. */
  logSizeMax?: number;
  /** Milliseconds to wait for a killed container's exit (default 30 s). */
  killTimeoutMs?: number;
  lifecycle?: ContainerLifecycle;
  /** Absent: CheckpointContainer and restores are FAILED_PRECONDITION. */
  checkpoint?: CheckpointSettings;
  /** Metrics and trace spans (daemon.ts: the one of observability/start.ts). */
  telemetry: Telemetry;
  log: Logger;
}
