/** ListPodSandbox: the pods a filter selects, each entry encoded once per record object. */
import { ListPodSandboxResponse, type ListPodSandboxRequest, type PodSandboxFilter } from '../gen/runtime/v1/api.js';
import { encodeAsParts, responsePerKey } from '../api/wire-reuse.js';
import { podConfigOf, type SandboxRecord } from '../sandbox/model.js';
import { criPodState } from './sandbox-convert.js';
import type { SandboxService } from '../sandbox/service.js';

/** The sandbox service's reads: the query RPCs change no pod. */
export type SandboxReads = Pick<SandboxService, 'get' | 'find' | 'list' | 'pauseState' | 'pauseSpec' | 'networkStatus'>;

/** Filters: `id` (full ID or unique prefix), `state`, and a label selector (every pair must match). */
export async function listPodSandbox(sandboxes: SandboxReads, req: ListPodSandboxRequest): Promise<ListPodSandboxResponse> {
  const parts = selectPodSandboxes(sandboxes, req.filter).map((record) => listPart(record));
  return encodeAsParts({ items: parts.map((p) => p.items[0]!) }, parts);
}

/** The ListPodSandbox entry of a record as a one-entry response, concatenated into the full list. */
export const listPart = responsePerKey((record: SandboxRecord): ListPodSandboxResponse => {
  const config = podConfigOf(record);
  return {
    items: [
      {
        id: record.id,
        metadata: config.metadata,
        state: criPodState(record),
        createdAt: record.createdAt,
        labels: config.labels,
        annotations: config.annotations,
        runtimeHandler: record.runtimeHandler,
      },
    ],
  };
});

/** The pods a filter selects, oldest first. */
export function selectPodSandboxes(sandboxes: SandboxReads, filter: PodSandboxFilter | undefined): SandboxRecord[] {
  let records = filter?.id ? [sandboxes.find(filter.id)].filter((r): r is SandboxRecord => r !== undefined) : sandboxes.list();
  if (filter?.state) records = records.filter((r) => criPodState(r) === filter.state!.state);
  const selector = Object.entries(filter?.labelSelector ?? {});
  if (selector.length) {
    records = records.filter((r) => {
      const labels = podConfigOf(r).labels;
      return selector.every(([k, v]) => labels[k] === v);
    });
  }
  return records.sort((a, b) => (a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : 0));
}
