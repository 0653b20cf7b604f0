/** StopPodSandbox: stopping an unknown or already stopped pod succeeds, as the CRI asks. */
import { StopPodSandboxResponse, type StopPodSandboxRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import type { PodLifecycle } from '../pod/lifecycle.js';

export async function stopPodSandbox(pods: PodLifecycle, req: StopPodSandboxRequest): Promise<StopPodSandboxResponse> {
  await pods.stop(requiredString(req.podSandboxId, 'pod_sandbox_id'));
  return StopPodSandboxResponse.fromPartial({});
}
