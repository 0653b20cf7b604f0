/**
 * GetContainerEvents: a stream of container lifecycle events for the kubelet's evented PLEG. Pod
 * sandboxes have events too (containerd sends them with the sandbox ID as container_id):
 * `withSandboxEvents` adds them around the sandbox RPCs; pod/exits.ts publishes them for a pause process that died.
 */
import { ContainerEventType, type ContainerEventResponse, type GetEventsRequest } from '../gen/runtime/v1/api.js';
import type { RuntimeHandlers, StreamSink } from '../api/handlers.js';
import type { SandboxLookup } from '../container/deps.js';
import type { ContainerService } from '../container/service.js';

export function getContainerEvents(containers: ContainerService, _req: GetEventsRequest, sink: StreamSink<ContainerEventResponse>): void {
  containers.subscribe(sink);
}

type SandboxRpcs = Pick<RuntimeHandlers, 'runPodSandbox' | 'stopPodSandbox' | 'removePodSandbox'>;

/** The sandbox RPCs, publishing CREATED and STARTED on run, STOPPED on the stop of a ready pod, DELETED on removal. */
export function withSandboxEvents(containers: ContainerService, sandboxes: SandboxLookup, handlers: SandboxRpcs): SandboxRpcs {
  // The handlers as they are now: the caller may put the wrappers in their place.
  const rpcs = { ...handlers };
  return {
    runPodSandbox: async (r) => {
      const res = await rpcs.runPodSandbox(r);
      containers.emitSandboxEvent(res.podSandboxId, ContainerEventType.CONTAINER_CREATED_EVENT);
      containers.emitSandboxEvent(res.podSandboxId, ContainerEventType.CONTAINER_STARTED_EVENT);
      return res;
    },
    stopPodSandbox: async (r) => {
      const before = sandboxes.find(r.podSandboxId);
      const res = await rpcs.stopPodSandbox(r);
      if (before?.state === 'ready') containers.emitSandboxEvent(before.id, ContainerEventType.CONTAINER_STOPPED_EVENT);
      return res;
    },
    removePodSandbox: async (r) => {
      const before = sandboxes.find(r.podSandboxId);
      const res = await rpcs.removePodSandbox(r);
      if (before) {
        if (before.state === 'ready') containers.emitSandboxEvent(before.id, ContainerEventType.CONTAINER_STOPPED_EVENT);
        containers.emitSandboxEvent(before.id, ContainerEventType.CONTAINER_DELETED_EVENT);
      }
      return res;
    },
  };
}
