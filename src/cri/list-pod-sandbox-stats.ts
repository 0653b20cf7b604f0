/** ListPodSandboxStats: stats of the ready pods a filter selects. */
import { ListPodSandboxStatsResponse, type ListPodSandboxStatsRequest, type PodSandboxStatsFilter } from '../gen/runtime/v1/api.js';
import { podConfigOf, type SandboxRecord } from '../sandbox/model.js';
import type { StatsDeps } from './container-stats.js';
import { podStats } from './pod-sandbox-stats.js';

export async function listPodSandboxStats(d: StatsDeps, req: ListPodSandboxStatsRequest): Promise<ListPodSandboxStatsResponse> {
  const stats = await Promise.all(readySandboxes(d, req.filter).map((s) => podStats(d, s)));
  return ListPodSandboxStatsResponse.fromPartial({ stats });
}

/** The ready sandboxes a stats filter selects. */
export function readySandboxes(d: StatsDeps, filter: PodSandboxStatsFilter | undefined): SandboxRecord[] {
  let sandboxes = d.sandboxes.list().filter((s) => s.state === 'ready');
  if (filter?.id) {
    const one = d.sandboxes.find(filter.id);
    sandboxes = sandboxes.filter((s) => s.id === one?.id);
  }
  const selector = Object.entries(filter?.labelSelector ?? {});
  if (selector.length) {
    sandboxes = sandboxes.filter((s) => {
      const labels = podConfigOf(s).labels;
      return selector.every(([k, v]) => labels[k] === v);
    });
  }
  return sandboxes;
}
