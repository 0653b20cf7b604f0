/**
 * GetContainerEvents: a stream of container and pod lifecycle events for the kubelet's evented PLEG,
 * from the one publisher (pod/events.ts).
 */
import type { ContainerEventResponse, GetEventsRequest } from '../gen/runtime/v1/api.js';
import type { StreamSink } from '../api/handlers.js';
import type { LifecycleEvents } from '../pod/events.js';

export function getContainerEvents(events: LifecycleEvents, _req: GetEventsRequest, sink: StreamSink<ContainerEventResponse>): void {
  events.subscribe(sink);
}
