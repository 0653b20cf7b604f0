/** UpdatePodSandboxResources: in-place pod resize (sandbox/resize.ts). */
import { UpdatePodSandboxResourcesResponse, type UpdatePodSandboxResourcesRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import { validateLinuxResources } from './validate-resources.js';
import type { PodLifecycle } from '../pod/lifecycle.js';

export async function updatePodSandboxResources(pods: PodLifecycle, req: UpdatePodSandboxResourcesRequest): Promise<UpdatePodSandboxResourcesResponse> {
  const id = requiredString(req.podSandboxId, 'pod_sandbox_id');
  validateLinuxResources(req.overhead, 'overhead');
  validateLinuxResources(req.resources, 'resources', { podLevel: true });
  await pods.updateResources(id, req.overhead, req.resources);
  return UpdatePodSandboxResourcesResponse.fromPartial({});
}
