/** ListContainerStats: stats of the containers a filter selects that are not EXITED (containerd lists live tasks only). */
import { ListContainerStatsResponse, type ContainerStatsFilter, type ListContainerStatsRequest } from '../gen/runtime/v1/api.js';
import type { ContainerRecord } from '../container/model.js';
import { containerStatsOf, type StatsDeps } from './container-stats.js';
import { filterContainers } from './list-containers.js';

export async function listContainerStats(d: StatsDeps, req: ListContainerStatsRequest): Promise<ListContainerStatsResponse> {
  const stats = await Promise.all(liveContainers(d, req.filter).map((r) => containerStatsOf(d, r)));
  return ListContainerStatsResponse.fromPartial({ stats });
}

/** The containers a stats filter selects that are not EXITED. */
export function liveContainers(d: StatsDeps, filter: ContainerStatsFilter | undefined): ContainerRecord[] {
  return filterContainers(d.containers, d.sandboxes, filter).filter((r) => r.state !== 'exited');
}
