/** RemovePodSandbox: removing an unknown pod succeeds; a ready pod is stopped first. */
import { RemovePodSandboxResponse, type RemovePodSandboxRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import type { PodLifecycle } from '../pod/lifecycle.js';

export async function removePodSandbox(pods: PodLifecycle, req: RemovePodSandboxRequest): Promise<RemovePodSandboxResponse> {
  await pods.remove(requiredString(req.podSandboxId, 'pod_sandbox_id'));
  return RemovePodSandboxResponse.fromPartial({});
}
