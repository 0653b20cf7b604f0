/**
 * The one publisher of lifecycle events: containers' (from the container service) and pods' (from the
 * pod lifecycle), for GetContainerEvents subscribers (the kubelet's evented PLEG; a pod's events carry
 * its sandbox ID as container_id, as containerd's do) and for lifecycle extensions (NRI notifications).
 *
 * Each event carries the pod's status and its containers' statuses as they are when it is published
 * (snapshotted at once), and events go out in call order.
 */
import { ContainerEventResponse, ContainerEventType, type ContainerStatus } from '../gen/runtime/v1/api.js';
import { nowNs } from '../common/clock.js';
import type { Logger } from '../common/logger.js';
import { toContainerStatus } from '../container/cri-status.js';
import type { ContainerEvents, ContainerLifecycle } from '../container/deps.js';
import type { ContainerRecord } from '../container/model.js';
import { toPodSandboxStatus } from '../sandbox/cri-status.js';
import type { SandboxRecord } from '../sandbox/model.js';
import { EventHub, type EventSink } from './event-hub.js';

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
  private readonly hub: EventHub<ContainerEventResponse>;
  /** The last event published for each pod. */
  private readonly lastPodEvent = new Map<string, ContainerEventType>();

  constructor(private readonly o: LifecycleEventsOptions) {
    this.hub = new EventHub({ maxBacklog: o.maxBacklog, log: o.log });
  }

  /** Adds a GetContainerEvents subscriber until its sink closes; returns an unsubscribe function. */
  subscribe(sink: EventSink<ContainerEventResponse>): () => void {
    return this.hub.subscribe(sink);
  }

  /** Ends every subscription (daemon shutdown). */
  close(): void {
    this.hub.close();
  }

  container(type: ContainerEventType, record: ContainerRecord, deleted = false): void {
    const extension = CONTAINER_EXTENSION_EVENT[type];
    if (extension) this.o.extensions?.containerEvent(extension, record);
    if (this.hub.size === 0) return;
    const statuses = this.o.containersOf(record.sandboxId).map(toContainerStatus);
    if (!deleted && !statuses.some((s) => s.id === record.id)) statuses.push(toContainerStatus(record));
    this.enqueue(record.id, record.sandboxId, type, statuses);
  }

  /** A pod's own event. A StopPodSandbox and the pause process's exit both report a stop: it goes out once. */
  pod(type: ContainerEventType, sandboxId: string): void {
    if (this.lastPodEvent.get(sandboxId) === type) return;
    if (type === ContainerEventType.CONTAINER_DELETED_EVENT) this.lastPodEvent.delete(sandboxId);
    else this.lastPodEvent.set(sandboxId, type);
    const extension = POD_EXTENSION_EVENT[type];
    if (extension) this.o.extensions?.podEvent(extension, sandboxId);
    if (this.hub.size === 0) return;
    this.enqueue(sandboxId, sandboxId, type, this.o.containersOf(sandboxId).map(toContainerStatus));
  }

  private enqueue(id: string, sandboxId: string, type: ContainerEventType, statuses: ContainerStatus[]): void {
    const createdAt = nowNs();
    const sandbox = this.o.sandbox(sandboxId);
    const podSandboxStatus = sandbox ? toPodSandboxStatus(sandbox) : undefined;
    const event = ContainerEventResponse.fromPartial({ containerId: id, containerEventType: type, createdAt, podSandboxStatus, containersStatuses: statuses });
    this.hub.publish(event);
  }
}

/** The extension notification each CRI event stands for. */
const CONTAINER_EXTENSION_EVENT: Partial<Record<ContainerEventType, 'created' | 'started' | 'stopped' | 'removed'>> = {
  [ContainerEventType.CONTAINER_CREATED_EVENT]: 'created',
  [ContainerEventType.CONTAINER_STARTED_EVENT]: 'started',
  [ContainerEventType.CONTAINER_STOPPED_EVENT]: 'stopped',
  [ContainerEventType.CONTAINER_DELETED_EVENT]: 'removed',
};
const POD_EXTENSION_EVENT: Partial<Record<ContainerEventType, 'started' | 'stopped' | 'removed'>> = {
  [ContainerEventType.CONTAINER_STARTED_EVENT]: 'started',
  [ContainerEventType.CONTAINER_STOPPED_EVENT]: 'stopped',
  [ContainerEventType.CONTAINER_DELETED_EVENT]: 'removed',
};
