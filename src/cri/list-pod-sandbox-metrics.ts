/** ListPodSandboxMetrics: metrics of every ready pod and its running containers (stats/metrics.ts). */
import { ListPodSandboxMetricsResponse, type PodSandboxMetrics } from '../gen/runtime/v1/api.js';
import type { SandboxLookup } from '../container/deps.js';
import type { MetricsReader } from '../stats/metrics.js';
import type { ContainerService } from '../container/service.js';
import type { SandboxRecord } from '../sandbox/model.js';
import { toPodSandboxMetrics } from './metrics-convert.js';

/** What the metrics RPCs read. */
export interface MetricsDeps {
  containers: ContainerService;
  sandboxes: SandboxLookup;
  metrics: MetricsReader;
}

export async function listPodSandboxMetrics(d: MetricsDeps): Promise<ListPodSandboxMetricsResponse> {
  return ListPodSandboxMetricsResponse.fromPartial({ podMetrics: await Promise.all(readyPods(d).map((s) => podMetrics(d, s))) });
}

export function readyPods(d: MetricsDeps): SandboxRecord[] {
  return d.sandboxes.list().filter((s) => s.state === 'ready');
}

export async function podMetrics(d: MetricsDeps, sandbox: SandboxRecord): Promise<PodSandboxMetrics> {
  return toPodSandboxMetrics(await d.metrics.podMetrics(sandbox, d.containers.store.ofSandbox(sandbox.id)));
}
