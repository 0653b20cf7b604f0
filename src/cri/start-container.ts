/** StartContainer: under the pod's lock, so that no container starts in a pod being stopped. */
import { StartContainerResponse, type StartContainerRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import type { PodLifecycle } from '../pod/lifecycle.js';

export async function startContainer(pods: Pick<PodLifecycle, 'startContainer'>, req: StartContainerRequest): Promise<StartContainerResponse> {
  await pods.startContainer(requiredString(req.containerId, 'container_id'));
  return StartContainerResponse.fromPartial({});
}
