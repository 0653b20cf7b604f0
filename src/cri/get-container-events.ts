/**
 * GetContainerEvents: a stream of container and pod lifecycle events for the kubelet's evented PLEG,
 * from the one publisher (pod/events.ts), each turned into a ContainerEventResponse once however many
 * subscribers there are.
 */
import { ContainerEventResponse, ContainerEventType, type GetEventsRequest } from '../gen/runtime/v1/api.js';
import type { StreamSink } from '../api/handlers.js';
import type { LifecycleEventType } from '../container/deps.js';
import type { LifecycleEvent, LifecycleEvents } from '../pod/events.js';
import { toContainerStatus } from './container-convert.js';
import { toPodSandboxStatus } from './sandbox-convert.js';
import { oncePerObject } from '../common/memo.js';

export function getContainerEvents(events: LifecycleEvents, _req: GetEventsRequest, sink: StreamSink<ContainerEventResponse>): void {
  events.subscribe({
    write: (event) => sink.write(toContainerEventResponse(event)),
    end: () => sink.end(),
    onClose: (listener) => sink.onClose(listener),
    get closed() {
      return sink.closed;
    },
  });
}

const EVENT_TYPES: Record<LifecycleEventType, ContainerEventType> = {
  created: ContainerEventType.CONTAINER_CREATED_EVENT,
  started: ContainerEventType.CONTAINER_STARTED_EVENT,
  stopped: ContainerEventType.CONTAINER_STOPPED_EVENT,
  deleted: ContainerEventType.CONTAINER_DELETED_EVENT,
};

/** The event in the CRI's terms (a pod's own event carries its sandbox ID as container_id), built once per event. */
const toContainerEventResponse = oncePerObject(
  (event: LifecycleEvent): ContainerEventResponse =>
    ContainerEventResponse.fromPartial({
      containerId: event.id,
      containerEventType: EVENT_TYPES[event.type],
      createdAt: event.createdAt,
      podSandboxStatus: event.sandbox ? toPodSandboxStatus(event.sandbox) : undefined,
      containersStatuses: event.containers.map(toContainerStatus),
    }),
);
