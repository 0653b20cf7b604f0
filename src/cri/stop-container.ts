/** StopContainer: the stop signal, then SIGKILL after `timeout` seconds; a stopped container succeeds. */
import { StopContainerResponse, type StopContainerRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import { invalidArgument } from '../common/errors.js';
import type { ContainerService } from '../container/service.js';

export async function stopContainer(containers: Pick<ContainerService, 'stop'>, req: StopContainerRequest): Promise<StopContainerResponse> {
  const id = requiredString(req.containerId, 'container_id');
  if (req.timeout < 0n) throw invalidArgument(`timeout ${req.timeout} must not be negative`);
  await containers.stop(id, Number(req.timeout));
  return StopContainerResponse.fromPartial({});
}
