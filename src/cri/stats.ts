/** ContainerStats, ListContainerStats, PodSandboxStats and ListPodSandboxStats. */
import {
  ContainerStatsResponse,
  ListContainerStatsResponse,
  ListPodSandboxStatsResponse,
  PodSandboxStatsResponse,
  type ContainerStatsRequest,
  type ListContainerStatsRequest,
  type ListPodSandboxStatsRequest,
  type PodSandboxStatsRequest,
} from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import { notFound } from '../common/errors.js';
import type { SandboxLookup } from '../container/deps.js';
import type { ContainerService } from '../container/service.js';
import type { StatsReader } from '../container/stats.js';
import { podConfigOf, type SandboxRecord } from '../sandbox/model.js';
import { filterContainers } from './container-query.js';

export interface StatsDeps {
  containers: ContainerService;
  sandboxes: SandboxLookup;
  stats: StatsReader;
}

export async function containerStats(d: StatsDeps, req: ContainerStatsRequest): Promise<ContainerStatsResponse> {
  const record = d.containers.get(requiredString(req.containerId, 'container_id'));
  return ContainerStatsResponse.fromPartial({ stats: await d.stats.containerStats(record) });
}

/** Stats of the containers the filter selects that are not EXITED (containerd lists live tasks only). */
export async function listContainerStats(d: StatsDeps, req: ListContainerStatsRequest): Promise<ListContainerStatsResponse> {
  const records = filterContainers(d.containers, d.sandboxes, req.filter).filter((r) => r.state !== 'exited');
  const stats = await Promise.all(records.map((r) => d.stats.containerStats(r)));
  return ListContainerStatsResponse.fromPartial({ stats });
}

export async function podSandboxStats(d: StatsDeps, req: PodSandboxStatsRequest): Promise<PodSandboxStatsResponse> {
  const id = requiredString(req.podSandboxId, 'pod_sandbox_id');
  const sandbox = d.sandboxes.find(id);
  if (!sandbox) throw notFound(`sandbox "${id}" not found`);
  return PodSandboxStatsResponse.fromPartial({ stats: await podStats(d, sandbox) });
}

/** Stats of the ready sandboxes the filter selects. */
export async function listPodSandboxStats(d: StatsDeps, req: ListPodSandboxStatsRequest): Promise<ListPodSandboxStatsResponse> {
  let sandboxes = d.sandboxes.list().filter((s) => s.state === 'ready');
  const filter = req.filter;
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
  const stats = await Promise.all(sandboxes.map((s) => podStats(d, s)));
  return ListPodSandboxStatsResponse.fromPartial({ stats });
}

function podStats(d: StatsDeps, sandbox: SandboxRecord) {
  return d.stats.podStats(sandbox, d.containers.store.ofSandbox(sandbox.id));
}
