/** ContainerStatus, ListContainers and StreamContainers. */
import {
  Container,
  ContainerStatusResponse,
  ListContainersResponse,
  StreamContainersResponse,
  type StreamContainersRequest,
  type ContainerFilter,
  type ContainerStatusRequest,
  type ListContainersRequest,
} from '../gen/runtime/v1/api.js';
import type { StreamSink } from '../api/handlers.js';
import { writeChunked } from '../api/stream-chunks.js';
import { encodeAsParts, responsePerKey } from '../api/wire-reuse.js';
import { requiredString } from './validate.js';
import { toContainerStatus, criState, toCriContainer } from './container-convert.js';
import { containerConfigOf, type ContainerRecord } from '../container/model.js';
import type { ContainerService } from '../container/service.js';
import type { SandboxLookup } from '../container/deps.js';

/** The answer without `verbose`: one per record object, encoded once. */
const briefStatus = responsePerKey((record: ContainerRecord) => ContainerStatusResponse.fromPartial({ status: toContainerStatus(record) }));

/** The ListContainers entry of a record as a one-entry response, concatenated into the full list. */
const listPart = responsePerKey((record: ContainerRecord): ListContainersResponse => ({ containers: [toCriContainer(record)] }));

export async function containerStatus(containers: ContainerService, req: ContainerStatusRequest): Promise<ContainerStatusResponse> {
  const record = containers.get(requiredString(req.containerId, 'container_id'));
  if (!req.verbose) return briefStatus(record);
  const info = { info: JSON.stringify(await verboseInfo(containers, record)) };
  return ContainerStatusResponse.fromPartial({ status: toContainerStatus(record), info });
}

/** What `crictl inspect` shows beyond the status (containerd's `info` keys where they apply). */
async function verboseInfo(containers: ContainerService, r: ContainerRecord): Promise<Record<string, unknown>> {
  const config = containerConfigOf(r);
  return {
    sandboxID: r.sandboxId,
    pid: r.pid,
    conmonPid: r.conmonPid,
    runtimeHandler: r.runtimeHandler || 'runc',
    runtimeBinary: containers.runtimeOf(r).binary,
    bundle: r.bundleDir,
    rootfs: r.rootfsDir,
    cgroupsPath: r.cgroupsPath,
    ...(r.imageVolumes ? { imageVolumes: r.imageVolumes } : {}),
    privileged: config.linux?.securityContext?.privileged ?? false,
    ...r.specEdits,
    runtimeSpec: await containers.specOf(r),
  };
}

export async function listContainers(containers: ContainerService, sandboxes: SandboxLookup, req: ListContainersRequest): Promise<ListContainersResponse> {
  const records = filterContainers(containers, sandboxes, req.filter);
  return encodeAsParts({ containers: records.map(toCriContainer) }, records.map(listPart));
}

/** What ListContainers returns, in bounded chunks. */
export async function streamContainers(
  containers: ContainerService,
  sandboxes: SandboxLookup,
  req: StreamContainersRequest,
  sink: StreamSink<StreamContainersResponse>,
): Promise<void> {
  const items = filterContainers(containers, sandboxes, req.filter).map(toCriContainer);
  await writeChunked(sink, [items], (c) => Container.encode(c).finish().length, (chunk) => StreamContainersResponse.fromPartial({ containers: chunk }));
}

/**
 * The containers a filter selects: `id` and `pod_sandbox_id` match a full ID or a unique prefix
 * (containerd's truncindex), `state` the CRI state, and every label of the selector must match.
 */
export function filterContainers(
  containers: Pick<ContainerService, 'find' | 'list'>,
  sandboxes: SandboxLookup,
  filter: Partial<Pick<ContainerFilter, 'id' | 'podSandboxId' | 'state' | 'labelSelector'>> | undefined,
): ContainerRecord[] {
  let records: ContainerRecord[];
  if (filter?.id) {
    const one = containers.find(filter.id);
    records = one ? [one] : [];
  } else {
    records = containers.list();
  }
  if (filter?.podSandboxId) {
    const sandboxId = sandboxes.find(filter.podSandboxId)?.id ?? filter.podSandboxId;
    records = records.filter((r) => r.sandboxId === sandboxId);
  }
  if (filter?.state) {
    const wanted = filter.state.state;
    records = records.filter((r) => criState(r.state) === wanted);
  }
  const selector = Object.entries(filter?.labelSelector ?? {});
  if (selector.length) {
    records = records.filter((r) => {
      const labels = containerConfigOf(r).labels;
      return selector.every(([k, v]) => labels[k] === v);
    });
  }
  return records.sort((a, b) => (a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : 0));
}
