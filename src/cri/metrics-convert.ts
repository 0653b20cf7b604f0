/** Pod and container metric samples (stats/metrics.ts) in the CRI's terms: PodSandboxMetrics and Metric. */
import { MetricType, PodSandboxMetrics, type DeepPartial, type Metric } from '../gen/runtime/v1/api.js';
import type { MetricKind, MetricSample, PodMetricSamples } from '../stats/metrics.js';

const METRIC_TYPES: Record<MetricKind, MetricType> = { counter: MetricType.COUNTER, gauge: MetricType.GAUGE };

export function toPodSandboxMetrics(m: PodMetricSamples): PodSandboxMetrics {
  return PodSandboxMetrics.fromPartial({
    podSandboxId: m.podSandboxId,
    metrics: m.samples.map(toMetric),
    containerMetrics: m.containers.map((c) => ({ containerId: c.containerId, metrics: c.samples.map(toMetric) })),
  });
}

function toMetric(s: MetricSample): DeepPartial<Metric> {
  return { name: s.name, timestamp: s.timestamp, metricType: METRIC_TYPES[s.kind], labelValues: s.labelValues, value: { value: s.value } };
}
