/** ListContainers: the containers a filter selects, each entry encoded once per record object. */
import { ListContainersResponse, type ContainerFilter, type ListContainersRequest } from '../gen/runtime/v1/api.js';
import { encodeAsParts, responsePerKey } from '../api/wire-reuse.js';
import { criState, toCriContainer } from './container-convert.js';
import { containerConfigOf, type ContainerRecord } from '../container/model.js';
import type { ContainerService } from '../container/service.js';
import type { SandboxLookup } from '../container/deps.js';

/** The ListContainers entry of a record as a one-entry response, concatenated into the full list. */
const listPart = responsePerKey((record: ContainerRecord): ListContainersResponse => ({ containers: [toCriContainer(record)] }));

export async function listContainers(containers: Pick<ContainerService, 'find' | 'list'>, sandboxes: SandboxLookup, req: ListContainersRequest): Promise<ListContainersResponse> {
  const records = filterContainers(containers, sandboxes, req.filter);
  return encodeAsParts({ containers: records.map(toCriContainer) }, records.map(listPart));
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
