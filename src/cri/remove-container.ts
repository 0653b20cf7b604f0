/** RemoveContainer: a running container is killed first; an unknown one succeeds. */
import { RemoveContainerResponse, type RemoveContainerRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import type { ContainerService } from '../container/service.js';

export async function removeContainer(containers: Pick<ContainerService, 'remove'>, req: RemoveContainerRequest): Promise<RemoveContainerResponse> {
  await containers.remove(requiredString(req.containerId, 'container_id'));
  return RemoveContainerResponse.fromPartial({});
}
