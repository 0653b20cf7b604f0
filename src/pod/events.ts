/**
 * The one publisher of lifecycle events: containers' (from the container service) and pods' (from the
 * pod lifecycle), for GetContainerEvents subscribers (the kubelet's evented PLEG; a pod's events carry
 * its sandbox ID as the event's id, as containerd's do) and for lifecycle extensions (NRI notifications).
 *
 * Each event carries the pod's record and its containers' records as they are when it is published
 * (records are replaced, never changed, so this is a snapshot), and events go out in call order.
 * cri/get-container-events.ts turns them into the CRI's ContainerEventResponse.
 */
import { nowNs } from '../common/clock.js';
import type { Logger } from '../common/logger.js';
import type { ContainerEvents, ContainerLifecycle, LifecycleEventType } from '../container/deps.js';
import type { ContainerRecord } from '../container/model.js';
import type { SandboxRecord } from '../sandbox/model.js';
import { EventHub, type EventSink } from './event-hub.js';

/** One published event. */
export interface LifecycleEvent {
  /** The container's ID, or the pod's for a pod's own event. */
  id: string;
  type: LifecycleEventType;
  /** When it was published, ns since the epoch. */
  createdAt: bigint;
  /** The pod, when it still exists. */
  sandbox?: SandboxRecord;
  /** The pod's containers (a deleted container no longer among them). */
  containers: readonly ContainerRecord[];
}

export interface LifecycleEventsOptions {
  /** The pod's record (the sandbox store); undefined once it is gone. */
  sandbox(id: string): SandboxRecord | undefined;
  /** The records of a pod's containers (the container store). */
  containersOf(sandboxId: string): ContainerRecord[];
  /** Lifecycle extensions told of each event (NRI); none when absent. */
  extensions?: Pick<ContainerLifecycle, 'containerEvent' | 'podEvent'>;
  /** Consecutive refused event writes after which a subscriber is dropped. */
  maxBacklog?: number;
  log: Logger;
}

export class LifecycleEvents implements ContainerEvents {
  private readonly hub: EventHub<LifecycleEvent>;
  /** The last event published for each pod. */
  private readonly lastPodEvent = new Map<string, LifecycleEventType>();

  constructor(private readonly options: LifecycleEventsOptions) {
    this.hub = new EventHub({ maxBacklog: options.maxBacklog, log: options.log });
  }

  /** Adds a subscriber until its sink closes; returns an unsubscribe function. */
  subscribe(sink: EventSink<LifecycleEvent>): () => void {
    return this.hub.subscribe(sink);
  }

  /** Ends every subscription (daemon shutdown). */
  close(): void {
    this.hub.close();
  }

  container(type: LifecycleEventType, record: ContainerRecord, deleted = false): void {
    const extension = CONTAINER_EXTENSION_EVENT[type];
    if (extension) this.options.extensions?.containerEvent(extension, record);
    if (this.hub.size === 0) return;
    const containers = [...this.options.containersOf(record.sandboxId)];
    if (!deleted && !containers.some((c) => c.id === record.id)) containers.push(record);
    this.enqueue(record.id, record.sandboxId, type, containers);
  }

  /** A pod's own event. A StopPodSandbox and the pause process's exit both report a stop: it goes out once. */
  pod(type: LifecycleEventType, sandboxId: string): void {
    if (this.lastPodEvent.get(sandboxId) === type) return;
    if (type === 'deleted') this.lastPodEvent.delete(sandboxId);
    else this.lastPodEvent.set(sandboxId, type);
    const extension = POD_EXTENSION_EVENT[type];
    if (extension) this.options.extensions?.podEvent(extension, sandboxId);
    if (this.hub.size === 0) return;
    this.enqueue(sandboxId, sandboxId, type, this.options.containersOf(sandboxId));
  }

  private enqueue(id: string, sandboxId: string, type: LifecycleEventType, containers: ContainerRecord[]): void {
    this.hub.publish({ id, type, createdAt: nowNs(), sandbox: this.options.sandbox(sandboxId), containers });
  }
}

/** The extension notification each event stands for. */
const CONTAINER_EXTENSION_EVENT: Record<LifecycleEventType, 'created' | 'started' | 'stopped' | 'removed'> = {
  created: 'created',
  started: 'started',
  stopped: 'stopped',
  deleted: 'removed',
};
const POD_EXTENSION_EVENT: Partial<Record<LifecycleEventType, 'started' | 'stopped' | 'removed'>> = {
  started: 'started',
  stopped: 'stopped',
  deleted: 'removed',
};
