/** ListMetricDescriptors, ListPodSandboxMetrics and StreamPodSandboxMetrics (stats/metrics.ts). */
import {
  ListMetricDescriptorsResponse,
  ListPodSandboxMetricsResponse,
  MetricType,
  PodSandboxMetrics,
  StreamPodSandboxMetricsResponse,
  type DeepPartial,
  type Metric,
  type StreamPodSandboxMetricsRequest,
} from '../gen/runtime/v1/api.js';
import type { StreamSink } from '../api/handlers.js';
import { loadInSlices, writeChunked } from '../api/stream-chunks.js';
import type { SandboxLookup } from '../container/deps.js';
import { metricDescriptors, type MetricKind, type MetricSample, type MetricsReader, type PodMetricSamples } from '../stats/metrics.js';
import type { ContainerService } from '../container/service.js';
import type { SandboxRecord } from '../sandbox/model.js';

export interface MetricsDeps {
  containers: ContainerService;
  sandboxes: SandboxLookup;
  metrics: MetricsReader;
}

export async function listMetricDescriptors(): Promise<ListMetricDescriptorsResponse> {
  return ListMetricDescriptorsResponse.fromPartial({ descriptors: metricDescriptors() });
}

/** Metrics of every ready pod and its running containers. */
export async function listPodSandboxMetrics(d: MetricsDeps): Promise<ListPodSandboxMetricsResponse> {
  return ListPodSandboxMetricsResponse.fromPartial({ podMetrics: await Promise.all(readyPods(d).map((s) => podMetrics(d, s))) });
}

/** What ListPodSandboxMetrics returns, read and sent a few pods at a time. */
export async function streamPodSandboxMetrics(d: MetricsDeps, _req: StreamPodSandboxMetricsRequest, sink: StreamSink<StreamPodSandboxMetricsResponse>): Promise<void> {
  const batches = loadInSlices(readyPods(d), 64, (slice) => Promise.all(slice.map((s) => podMetrics(d, s))));
  await writeChunked(sink, batches, (m) => PodSandboxMetrics.encode(m).finish().length, (podSandboxMetrics) =>
    StreamPodSandboxMetricsResponse.fromPartial({ podSandboxMetrics }),
  );
}

function readyPods(d: MetricsDeps): SandboxRecord[] {
  return d.sandboxes.list().filter((s) => s.state === 'ready');
}

async function podMetrics(d: MetricsDeps, sandbox: SandboxRecord): Promise<PodSandboxMetrics> {
  return toPodSandboxMetrics(await d.metrics.podMetrics(sandbox, d.containers.store.ofSandbox(sandbox.id)));
}

const METRIC_TYPES: Record<MetricKind, MetricType> = { counter: MetricType.COUNTER, gauge: MetricType.GAUGE };

function toPodSandboxMetrics(m: PodMetricSamples): PodSandboxMetrics {
  return PodSandboxMetrics.fromPartial({
    podSandboxId: m.podSandboxId,
    metrics: m.samples.map(toMetric),
    containerMetrics: m.containers.map((c) => ({ containerId: c.containerId, metrics: c.samples.map(toMetric) })),
  });
}

function toMetric(s: MetricSample): DeepPartial<Metric> {
  return { name: s.name, timestamp: s.timestamp, metricType: METRIC_TYPES[s.kind], labelValues: s.labelValues, value: { value: s.value } };
}
