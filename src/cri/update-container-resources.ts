/** UpdateContainerResources: new cgroup limits for a created or running container. */
import { UpdateContainerResourcesResponse, type UpdateContainerResourcesRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import { validateLinuxResources } from './validate-resources.js';
import type { ContainerService } from '../container/service.js';

export async function updateContainerResources(
  containers: Pick<ContainerService, 'updateResources'>,
  req: UpdateContainerResourcesRequest,
): Promise<UpdateContainerResourcesResponse> {
  const id = requiredString(req.containerId, 'container_id');
  validateLinuxResources(req.linux, 'linux');
  await containers.updateResources(id, req.linux);
  return UpdateContainerResourcesResponse.fromPartial({});
}
