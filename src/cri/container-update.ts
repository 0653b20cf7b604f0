/** UpdateContainerResources and ReopenContainerLog. */
import {
  ReopenContainerLogResponse,
  UpdateContainerResourcesResponse,
  type ReopenContainerLogRequest,
  type UpdateContainerResourcesRequest,
} from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import { validateLinuxResources } from './validate-resources.js';
import type { ContainerService } from '../container/service.js';

export async function updateContainerResources(containers: ContainerService, req: UpdateContainerResourcesRequest): Promise<UpdateContainerResourcesResponse> {
  const id = requiredString(req.containerId, 'container_id');
  validateLinuxResources(req.linux, 'linux');
  await containers.updateResources(id, req.linux);
  return UpdateContainerResourcesResponse.fromPartial({});
}

export async function reopenContainerLog(containers: ContainerService, req: ReopenContainerLogRequest): Promise<ReopenContainerLogResponse> {
  await containers.reopenLog(requiredString(req.containerId, 'container_id'));
  return ReopenContainerLogResponse.fromPartial({});
}
