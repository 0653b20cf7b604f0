/** StreamPodSandboxStats: what ListPodSandboxStats returns, read and sent a slice at a time. */
import { PodSandboxStats, StreamPodSandboxStatsResponse, type StreamPodSandboxStatsRequest } from '../gen/runtime/v1/api.js';
import type { StreamSink } from '../api/handlers.js';
import { loadInSlices, writeChunked } from '../api/stream-chunks.js';
import { STATS_SLICE, type StatsDeps } from './container-stats.js';
import { readySandboxes } from './list-pod-sandbox-stats.js';
import { podStats } from './pod-sandbox-stats.js';

export async function streamPodSandboxStats(d: StatsDeps, req: StreamPodSandboxStatsRequest, sink: StreamSink<StreamPodSandboxStatsResponse>): Promise<void> {
  const batches = loadInSlices(readySandboxes(d, req.filter), STATS_SLICE, (slice) => Promise.all(slice.map((s) => podStats(d, s))));
  await writeChunked(sink, batches, (s) => PodSandboxStats.encode(s).finish().length, (podSandboxStats) =>
    StreamPodSandboxStatsResponse.fromPartial({ podSandboxStats }),
  );
}
