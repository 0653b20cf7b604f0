/** PodSandboxStats: one pod's usage, its containers' included (stats/stats.ts), in the CRI's terms. */
import { PodSandboxStatsResponse, type PodSandboxStats, type PodSandboxStatsRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import { notFound } from '../common/errors.js';
import type { SandboxRecord } from '../sandbox/model.js';
import type { StatsDeps } from './container-stats.js';
import { toPodSandboxStats } from './stats-convert.js';

export async function podSandboxStats(d: StatsDeps, req: PodSandboxStatsRequest): Promise<PodSandboxStatsResponse> {
  const id = requiredString(req.podSandboxId, 'pod_sandbox_id');
  const sandbox = d.sandboxes.find(id);
  if (!sandbox) throw notFound(`sandbox "${id}" not found`);
  return PodSandboxStatsResponse.fromPartial({ stats: await podStats(d, sandbox) });
}

export async function podStats(d: StatsDeps, sandbox: SandboxRecord): Promise<PodSandboxStats> {
  return toPodSandboxStats(await d.stats.podStats(sandbox, d.containers.store.ofSandbox(sandbox.id)));
}
