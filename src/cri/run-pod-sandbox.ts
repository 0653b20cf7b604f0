/** RunPodSandbox. */
import { RunPodSandboxResponse, type RunPodSandboxRequest } from '../gen/runtime/v1/api.js';
import { required } from './validate.js';
import { validateLinuxResources } from './validate-resources.js';
import type { PodLifecycle } from '../pod/lifecycle.js';

export async function runPodSandbox(pods: PodLifecycle, req: RunPodSandboxRequest): Promise<RunPodSandboxResponse> {
  const config = required(req.config, 'config');
  validateLinuxResources(config.linux?.overhead, 'config.linux.overhead');
  validateLinuxResources(config.linux?.resources, 'config.linux.resources');
  const record = await pods.run(config, req.runtimeHandler);
  return RunPodSandboxResponse.fromPartial({ podSandboxId: record.id });
}
