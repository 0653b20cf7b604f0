/** StreamContainerStats: what ListContainerStats returns, read and sent a slice at a time. */
import { ContainerStats, StreamContainerStatsResponse, type StreamContainerStatsRequest } from '../gen/runtime/v1/api.js';
import type { StreamSink } from '../api/handlers.js';
import { loadInSlices, writeChunked } from '../api/stream-chunks.js';
import { containerStatsOf, STATS_SLICE, type StatsDeps } from './container-stats.js';
import { liveContainers } from './list-container-stats.js';

export async function streamContainerStats(d: StatsDeps, req: StreamContainerStatsRequest, sink: StreamSink<StreamContainerStatsResponse>): Promise<void> {
  const batches = loadInSlices(liveContainers(d, req.filter), STATS_SLICE, (slice) => Promise.all(slice.map((r) => containerStatsOf(d, r))));
  await writeChunked(sink, batches, (s) => ContainerStats.encode(s).finish().length, (containerStats) =>
    StreamContainerStatsResponse.fromPartial({ containerStats }),
  );
}
