/**
 * The pod lifecycle: the one owner of what spans a pod and its containers. It orders StopPodSandbox
 * and RemovePodSandbox (containers first, then the pause container and the network, as containerd
 * does), routes each exit file to the module that owns its ID, and publishes the pod's own events.
 * The sandbox and container services know nothing of each other; each publishes its own events
 * through the one publisher.
 *
 * Ordering rule: the per-pod lock here is the only lock of a pod. Under it run every change to a pod
 * (stop, remove, resize, its pause process's exit from the exit dir or noticed by PodSandboxStatus,
 * start-up reconciling) and CreateContainer and StartContainer, which need the pod ready until they
 * are done: else a RemovePodSandbox could miss a container being created, or a StopPodSandbox leave a
 * container started after it stopped the others. The sandbox service's steps take no lock of their
 * own, so two of them never interleave on one pod and nothing waits on a second lock. A container's
 * own operations take the container service's per-container lock; when both are held the pod's is
 * taken first, and the container service never calls back here, so the order cannot invert. Lookups
 * read the in-memory stores and take no lock.
 */
import type { ContainerConfig, LinuxContainerResources, PodSandboxConfig } from '../gen/runtime/v1/api.js';
import { failedPrecondition, wrap } from '../common/errors.js';
import { KeyedMutex } from '../common/locks.js';
import type { LifecycleEventType, PodResizeExtensions } from '../container/deps.js';
import type { ContainerRecord } from '../container/model.js';
import type { ExitRecord } from '../monitor/exits.js';
import type { PauseState, SandboxRecord } from '../sandbox/model.js';

/**
 * What the pod lifecycle needs of the sandbox service: lock-free steps on one pod by full ID, each
 * called here under that pod's lock.
 */
export interface PodSandboxes {
  find(idOrPrefix: string): SandboxRecord | undefined;
  /** NotFound for an unknown pod. */
  get(idOrPrefix: string): SandboxRecord;
  /** Whether the pause process runs, exited or is deleted (no lock: a read). */
  pauseState(record: SandboxRecord): Promise<PauseState>;
  /** Stops the pause container and the network (the containers are stopped already). */
  stop(id: string): Promise<void>;
  /** Removes a pod whose containers are gone. */
  remove(id: string): Promise<void>;
  /** Writes the pod-level resources of a ready pod into its cgroup and record. */
  updateResources(id: string, overhead: LinuxContainerResources | undefined, resources: LinuxContainerResources | undefined): Promise<SandboxRecord>;
  /** Makes a ready pod whose pause process is gone NOTREADY; true when it did. */
  notePauseExit(id: string, exit?: ExitRecord): Promise<boolean>;
  /** Loads the records at start-up; the pods' IDs. */
  load(): Promise<string[]>;
  /** Removes what interrupted runs left (after `load`). */
  collectGarbage(): Promise<void>;
}

/** What the pod lifecycle needs of the container service. */
export interface PodContainers {
  /** CreateContainer in a ready pod (NotFound, FailedPrecondition otherwise). */
  create(podSandboxId: string, config: ContainerConfig, requestPodConfig?: PodSandboxConfig, signal?: AbortSignal): Promise<ContainerRecord>;
  /** The container with this ID or unique ID prefix, or undefined. */
  find(idOrPrefix: string): ContainerRecord | undefined;
  /** StartContainer (NotFound, FailedPrecondition for one not CREATED). */
  start(idOrPrefix: string): Promise<void>;
  /** Stops every running container of the pod (timeout 0 kills at once). */
  stopAll(sandboxId: string, timeoutSeconds: number): Promise<void>;
  /** Removes every container of the pod. */
  removeAll(sandboxId: string): Promise<void>;
  handleExit(exit: ExitRecord): Promise<unknown>;
}

/** Where a pod's own events go (pod/events.ts). */
export interface PodEvents {
  pod(type: LifecycleEventType, sandboxId: string): void;
}

/** RunPodSandbox's steps (sandbox/run.ts). */
export interface PodRunner {
  run(config: PodSandboxConfig, runtimeHandler: string): Promise<SandboxRecord>;
}

export interface PodLifecycleOptions {
  runner: PodRunner;
  sandboxes: PodSandboxes;
  containers: PodContainers;
  events: PodEvents;
  /** Lifecycle extensions told of pod resizes (NRI's UpdatePodSandbox); none when absent. */
  extensions?: PodResizeExtensions;
}

export class PodLifecycle {
  private readonly locks = new KeyedMutex();

  constructor(private readonly options: PodLifecycleOptions) {}

  /** Creates and starts a pod; CREATED and STARTED go out once it runs. */
  async run(config: PodSandboxConfig, runtimeHandler: string): Promise<SandboxRecord> {
    const record = await this.options.runner.run(config, runtimeHandler);
    this.options.events.pod('created', record.id);
    this.options.events.pod('started', record.id);
    return record;
  }

  /** Stops the pod's containers, then the pod. Unknown or stopped: nothing to do. */
  async stop(idOrPrefix: string): Promise<void> {
    const found = this.options.sandboxes.find(idOrPrefix);
    if (!found) return;
    await this.locks.run(found.id, () => this.stopLocked(found.id));
  }

  /** Stops the pod if needed, removes its containers, then the pod. Unknown: nothing to do. */
  async remove(idOrPrefix: string): Promise<void> {
    const found = this.options.sandboxes.find(idOrPrefix);
    if (!found) return;
    const id = found.id;
    await this.locks.run(id, async () => {
      if (!this.options.sandboxes.find(id)) return;
      await this.stopLocked(id);
      try {
        await this.options.containers.removeAll(id);
      } catch (err) {
        throw wrap(err, `failed to remove containers of sandbox "${id}"`);
      }
      await this.options.sandboxes.remove(id);
      this.options.events.pod('deleted', id);
    });
  }

  /**
   * CreateContainer: under the pod's lock, so that the pod stays ready until the container is recorded
   * and a StopPodSandbox or RemovePodSandbox after it finds the container.
   */
  async createContainer(podSandboxId: string, config: ContainerConfig, requestPodConfig?: PodSandboxConfig, signal?: AbortSignal): Promise<ContainerRecord> {
    const id = this.options.sandboxes.find(podSandboxId)?.id;
    // An unknown pod: nothing to hold; the container service says NotFound.
    if (!id) return this.options.containers.create(podSandboxId, config, requestPodConfig, signal);
    return this.locks.run(id, () => this.options.containers.create(id, config, requestPodConfig, signal));
  }

  /**
   * StartContainer: only in a ready pod (as containerd), and under the pod's lock, so that a
   * StopPodSandbox either stops the started container or comes first and keeps it from starting.
   */
  async startContainer(idOrPrefix: string): Promise<void> {
    const container = this.options.containers.find(idOrPrefix);
    // An unknown container: the container service says NotFound.
    if (!container) return this.options.containers.start(idOrPrefix);
    const podId = container.sandboxId;
    await this.locks.run(podId, async () => {
      if (this.options.sandboxes.find(podId)?.state !== 'ready') {
        throw failedPrecondition(`failed to start container "${container.id}": sandbox "${podId}" is not ready: containers can only be started in a ready sandbox`);
      }
      await this.options.containers.start(container.id);
    });
  }

  /**
   * UpdatePodSandboxResources: the pod's own cgroup gets the new limits. NotFound for an unknown pod,
   * FailedPrecondition for one that is not ready.
   */
  async updateResources(idOrPrefix: string, overhead: LinuxContainerResources | undefined, resources: LinuxContainerResources | undefined): Promise<SandboxRecord> {
    const { id } = this.options.sandboxes.get(idOrPrefix);
    return this.locks.run(id, async () => {
      const ext = this.options.extensions;
      const current = this.options.sandboxes.get(id);
      if (ext && current.state === 'ready') await ext.updatingPod(current, overhead, resources);
      const updated = await this.options.sandboxes.updateResources(id, overhead, resources);
      ext?.podUpdated(updated);
      return updated;
    });
  }

  /**
   * The pod's record for PodSandboxStatus, after checking that the pause process of a READY pod still
   * runs: one that died without an exit file (its conmon was killed too) makes the pod NOTREADY here.
   * `pause` is what that check found, for the verbose answer (none for a pod that was not READY).
   * NotFound for an unknown pod.
   */
  async status(idOrPrefix: string): Promise<{ record: SandboxRecord; pause?: PauseState }> {
    const record = this.options.sandboxes.get(idOrPrefix);
    if (record.state !== 'ready') return { record };
    const pause = await this.options.sandboxes.pauseState(record);
    if (pause === 'running') return { record, pause };
    await this.locks.run(record.id, () => this.notePauseExit(record.id));
    return { record: this.options.sandboxes.find(record.id) ?? record, pause };
  }

  /** One exit file from conmon's exit dir: a pause container's goes to the pod, others to their container. */
  async routeExit(exit: ExitRecord): Promise<void> {
    if (this.options.sandboxes.find(exit.id)?.id !== exit.id) {
      await this.options.containers.handleExit(exit);
      return;
    }
    await this.locks.run(exit.id, () => this.notePauseExit(exit.id, exit));
  }

  /**
   * Start-up, before the API answers: loads the pods, makes NOTREADY those whose pause process died
   * while Stove was down, and removes what interrupted runs left. The exit watcher runs already, so
   * each pod is reconciled under its lock; no events go out (the pods stopped before this start).
   */
  async recover(): Promise<void> {
    for (const id of await this.options.sandboxes.load()) {
      await this.locks.run(id, () => this.options.sandboxes.notePauseExit(id));
    }
    await this.options.sandboxes.collectGarbage();
  }

  private async notePauseExit(id: string, exit?: ExitRecord): Promise<void> {
    if (await this.options.sandboxes.notePauseExit(id, exit)) this.options.events.pod('stopped', id);
  }

  private async stopLocked(id: string): Promise<void> {
    const before = this.options.sandboxes.find(id);
    if (!before) return;
    try {
      await this.options.containers.stopAll(id, 0);
    } catch (err) {
      throw wrap(err, `failed to stop containers of sandbox "${id}"`);
    }
    await this.options.sandboxes.stop(id);
    if (before.state === 'ready') this.options.events.pod('stopped', id);
  }
}
