/** StopPodSandbox: stopping an unknown or already stopped pod succeeds, as the CRI asks. */
import { StopPodSandboxResponse, type StopPodSandboxRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import type { SandboxService } from '../sandbox/service.js';

export async function stopPodSandbox(sandboxes: SandboxService, req: StopPodSandboxRequest): Promise<StopPodSandboxResponse> {
  await sandboxes.stop(requiredString(req.podSandboxId, 'pod_sandbox_id'));
  return StopPodSandboxResponse.fromPartial({});
}
