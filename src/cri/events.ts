/** GetContainerEvents: a stream of container (and pod) lifecycle events for the kubelet's evented PLEG. */
import type { ContainerEventResponse, GetEventsRequest } from '../gen/runtime/v1/api.js';
import type { StreamSink } from '../api/handlers.js';
import type { ContainerService } from '../container/service.js';

export function getContainerEvents(containers: ContainerService, _req: GetEventsRequest, sink: StreamSink<ContainerEventResponse>): void {
  containers.subscribe(sink);
}
