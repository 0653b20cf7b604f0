/** RemovePodSandbox: removing an unknown pod succeeds; a ready pod is stopped first. */
import { RemovePodSandboxResponse, type RemovePodSandboxRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import type { SandboxService } from '../sandbox/service.js';

export async function removePodSandbox(sandboxes: SandboxService, req: RemovePodSandboxRequest): Promise<RemovePodSandboxResponse> {
  await sandboxes.remove(requiredString(req.podSandboxId, 'pod_sandbox_id'));
  return RemovePodSandboxResponse.fromPartial({});
}
