/** ContainerStats: one container's usage (stats/stats.ts) in the CRI's terms. */
import { ContainerStatsResponse, type ContainerStats, type ContainerStatsRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import type { SandboxLookup } from '../container/deps.js';
import type { ContainerRecord } from '../container/model.js';
import type { ContainerService } from '../container/service.js';
import type { StatsReader } from '../stats/stats.js';
import { toContainerStats } from './stats-convert.js';

/** What the stats RPCs read. */
export interface StatsDeps {
  containers: ContainerService;
  sandboxes: SandboxLookup;
  stats: StatsReader;
}

export async function containerStats(d: StatsDeps, req: ContainerStatsRequest): Promise<ContainerStatsResponse> {
  const record = d.containers.get(requiredString(req.containerId, 'container_id'));
  return ContainerStatsResponse.fromPartial({ stats: await containerStatsOf(d, record) });
}

export async function containerStatsOf(d: StatsDeps, record: ContainerRecord): Promise<ContainerStats> {
  return toContainerStats(await d.stats.containerStats(record));
}

/** How many objects' stats are read at once by the Stream* calls. */
export const STATS_SLICE = 64;
