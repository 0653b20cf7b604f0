/** ContainerStats, PodSandboxStats, their List* and Stream* forms. */
import {
  ContainerStatsResponse,
  ListContainerStatsResponse,
  ContainerStats,
  ListPodSandboxStatsResponse,
  PodSandboxStats,
  PodSandboxStatsResponse,
  StreamContainerStatsResponse,
  StreamPodSandboxStatsResponse,
  type ContainerStatsFilter,
  type PodSandboxStatsFilter,
  type StreamContainerStatsRequest,
  type StreamPodSandboxStatsRequest,
  type ContainerStatsRequest,
  type ListContainerStatsRequest,
  type ListPodSandboxStatsRequest,
  type PodSandboxStatsRequest,
} from '../gen/runtime/v1/api.js';
import type { StreamSink } from '../api/handlers.js';
import { loadInSlices, writeChunked } from '../api/stream-chunks.js';
import { requiredString } from './validate.js';
import { notFound } from '../common/errors.js';
import type { SandboxLookup } from '../container/deps.js';
import type { ContainerRecord } from '../container/model.js';
import type { ContainerService } from '../container/service.js';
import type { StatsReader } from '../stats/stats.js';
import { podConfigOf, type SandboxRecord } from '../sandbox/model.js';
import { filterContainers } from './container-query.js';
import { toContainerStats, toPodSandboxStats } from './stats-convert.js';

export interface StatsDeps {
  containers: ContainerService;
  sandboxes: SandboxLookup;
  stats: StatsReader;
}

export async function containerStats(d: StatsDeps, req: ContainerStatsRequest): Promise<ContainerStatsResponse> {
  const record = d.containers.get(requiredString(req.containerId, 'container_id'));
  return ContainerStatsResponse.fromPartial({ stats: toContainerStats(await d.stats.containerStats(record)) });
}

/** Stats of the containers the filter selects that are not EXITED (containerd lists live tasks only). */
export async function listContainerStats(d: StatsDeps, req: ListContainerStatsRequest): Promise<ListContainerStatsResponse> {
  const stats = await Promise.all(liveContainers(d, req.filter).map((r) => containerStatsOf(d, r)));
  return ListContainerStatsResponse.fromPartial({ stats });
}

/** What ListContainerStats returns, read and sent a slice at a time. */
export async function streamContainerStats(d: StatsDeps, req: StreamContainerStatsRequest, sink: StreamSink<StreamContainerStatsResponse>): Promise<void> {
  const batches = loadInSlices(liveContainers(d, req.filter), STATS_SLICE, (slice) => Promise.all(slice.map((r) => containerStatsOf(d, r))));
  await writeChunked(sink, batches, (s) => ContainerStats.encode(s).finish().length, (containerStats) =>
    StreamContainerStatsResponse.fromPartial({ containerStats }),
  );
}

/** How many objects' stats are read at once by the Stream* calls. */
const STATS_SLICE = 64;

function liveContainers(d: StatsDeps, filter: ContainerStatsFilter | undefined) {
  return filterContainers(d.containers, d.sandboxes, filter).filter((r) => r.state !== 'exited');
}

export async function podSandboxStats(d: StatsDeps, req: PodSandboxStatsRequest): Promise<PodSandboxStatsResponse> {
  const id = requiredString(req.podSandboxId, 'pod_sandbox_id');
  const sandbox = d.sandboxes.find(id);
  if (!sandbox) throw notFound(`sandbox "${id}" not found`);
  return PodSandboxStatsResponse.fromPartial({ stats: await podStats(d, sandbox) });
}

/** Stats of the ready sandboxes the filter selects. */
export async function listPodSandboxStats(d: StatsDeps, req: ListPodSandboxStatsRequest): Promise<ListPodSandboxStatsResponse> {
  const stats = await Promise.all(readySandboxes(d, req.filter).map((s) => podStats(d, s)));
  return ListPodSandboxStatsResponse.fromPartial({ stats });
}

/** What ListPodSandboxStats returns, read and sent a slice at a time. */
export async function streamPodSandboxStats(d: StatsDeps, req: StreamPodSandboxStatsRequest, sink: StreamSink<StreamPodSandboxStatsResponse>): Promise<void> {
  const batches = loadInSlices(readySandboxes(d, req.filter), STATS_SLICE, (slice) => Promise.all(slice.map((s) => podStats(d, s))));
  await writeChunked(sink, batches, (s) => PodSandboxStats.encode(s).finish().length, (podSandboxStats) =>
    StreamPodSandboxStatsResponse.fromPartial({ podSandboxStats }),
  );
}

/** The ready sandboxes a stats filter selects. */
function readySandboxes(d: StatsDeps, filter: PodSandboxStatsFilter | undefined): SandboxRecord[] {
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

async function containerStatsOf(d: StatsDeps, record: ContainerRecord): Promise<ContainerStats> {
  return toContainerStats(await d.stats.containerStats(record));
}

async function podStats(d: StatsDeps, sandbox: SandboxRecord): Promise<PodSandboxStats> {
  return toPodSandboxStats(await d.stats.podStats(sandbox, d.containers.store.ofSandbox(sandbox.id)));
}
