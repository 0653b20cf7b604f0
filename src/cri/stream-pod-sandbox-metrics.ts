/** StreamPodSandboxMetrics: what ListPodSandboxMetrics returns, read and sent a few pods at a time. */
import { PodSandboxMetrics, StreamPodSandboxMetricsResponse, type StreamPodSandboxMetricsRequest } from '../gen/runtime/v1/api.js';
import type { StreamSink } from '../api/handlers.js';
import { loadInSlices, writeChunked } from '../api/stream-chunks.js';
import { podMetrics, readyPods, type MetricsDeps } from './list-pod-sandbox-metrics.js';

export async function streamPodSandboxMetrics(d: MetricsDeps, _req: StreamPodSandboxMetricsRequest, sink: StreamSink<StreamPodSandboxMetricsResponse>): Promise<void> {
  const batches = loadInSlices(readyPods(d), 64, (slice) => Promise.all(slice.map((s) => podMetrics(d, s))));
  await writeChunked(sink, batches, (m) => PodSandboxMetrics.encode(m).finish().length, (podSandboxMetrics) =>
    StreamPodSandboxMetricsResponse.fromPartial({ podSandboxMetrics }),
  );
}
