/**
 * The pod lifecycle: the one owner of what spans a pod and its containers. It holds the per-pod lock
 * under which StopPodSandbox, RemovePodSandbox and the pause process's exit run, orders them
 * (containers first, then the pause container and the network, as containerd does), routes each exit
 * file to the module that owns its ID, and publishes the pod's own events. The sandbox and container
 * services know nothing of each other; each publishes its own events through the one publisher.
 */
import { ContainerEventType, type PodSandboxConfig } from '../gen/runtime/v1/api.js';
import { wrap } from '../common/errors.js';
import { KeyedMutex } from '../common/locks.js';
import type { ExitRecord } from '../monitor/exits.js';
import type { SandboxRecord } from '../sandbox/model.js';

/** What the pod lifecycle needs of the sandbox service. */
export interface PodSandboxes {
  run(config: PodSandboxConfig, runtimeHandler: string): Promise<SandboxRecord>;
  find(idOrPrefix: string): SandboxRecord | undefined;
  /** Stops the pause container and the network (the containers are stopped already). */
  stop(id: string): Promise<void>;
  /** Removes a pod whose containers are gone. */
  remove(id: string): Promise<void>;
  /** Handles an exit file of a pause container; false when the ID is no pod. */
  handleExit(exit: ExitRecord): Promise<boolean>;
}

/** What the pod lifecycle needs of the container service. */
export interface PodContainers {
  /** Stops every running container of the pod (timeout 0 kills at once). */
  stopAll(sandboxId: string, timeoutSeconds: number): Promise<void>;
  /** Removes every container of the pod. */
  removeAll(sandboxId: string): Promise<void>;
  handleExit(exit: ExitRecord): Promise<unknown>;
}

/** Where a pod's own events go (pod/events.ts). */
export interface PodEvents {
  pod(type: ContainerEventType, sandboxId: string): void;
}

export interface PodLifecycleOptions {
  sandboxes: PodSandboxes;
  containers: PodContainers;
  events: PodEvents;
}

export class PodLifecycle {
  private readonly locks = new KeyedMutex();

  constructor(private readonly o: PodLifecycleOptions) {}

  /** Creates and starts a pod; CREATED and STARTED go out once it runs. */
  async run(config: PodSandboxConfig, runtimeHandler: string): Promise<SandboxRecord> {
    const record = await this.o.sandboxes.run(config, runtimeHandler);
    this.o.events.pod(ContainerEventType.CONTAINER_CREATED_EVENT, record.id);
    this.o.events.pod(ContainerEventType.CONTAINER_STARTED_EVENT, record.id);
    return record;
  }

  /** Stops the pod's containers, then the pod. Unknown or stopped: nothing to do. */
  async stop(idOrPrefix: string): Promise<void> {
    const found = this.o.sandboxes.find(idOrPrefix);
    if (!found) return;
    await this.locks.run(found.id, () => this.stopLocked(found.id));
  }

  /** Stops the pod if needed, removes its containers, then the pod. Unknown: nothing to do. */
  async remove(idOrPrefix: string): Promise<void> {
    const found = this.o.sandboxes.find(idOrPrefix);
    if (!found) return;
    const id = found.id;
    await this.locks.run(id, async () => {
      if (!this.o.sandboxes.find(id)) return;
      await this.stopLocked(id);
      try {
        await this.o.containers.removeAll(id);
      } catch (err) {
        throw wrap(err, `failed to remove containers of sandbox "${id}"`);
      }
      await this.o.sandboxes.remove(id);
      this.o.events.pod(ContainerEventType.CONTAINER_DELETED_EVENT, id);
    });
  }

  /** One exit file from conmon's exit dir: a pause container's goes to the pod, others to their container. */
  async routeExit(exit: ExitRecord): Promise<void> {
    if (this.o.sandboxes.find(exit.id)?.id !== exit.id) {
      await this.o.containers.handleExit(exit);
      return;
    }
    await this.locks.run(exit.id, async () => {
      const wasReady = this.o.sandboxes.find(exit.id)?.state === 'ready';
      await this.o.sandboxes.handleExit(exit);
      if (wasReady && this.o.sandboxes.find(exit.id)?.state === 'notready') {
        this.o.events.pod(ContainerEventType.CONTAINER_STOPPED_EVENT, exit.id);
      }
    });
  }

  private async stopLocked(id: string): Promise<void> {
    const before = this.o.sandboxes.find(id);
    if (!before) return;
    try {
      await this.o.containers.stopAll(id, 0);
    } catch (err) {
      throw wrap(err, `failed to stop containers of sandbox "${id}"`);
    }
    await this.o.sandboxes.stop(id);
    if (before.state === 'ready') this.o.events.pod(ContainerEventType.CONTAINER_STOPPED_EVENT, id);
  }
}
