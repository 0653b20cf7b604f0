/**
 * CheckpointContainer (KEP-2008): a checkpoint archive of a running container at `location`, which
 * keeps running. The container service does the work (checkpoint/write.ts); an archive location
 * outside the allowed directories is INVALID_ARGUMENT, a node without working CRIU FAILED_PRECONDITION.
 */
import { CheckpointContainerResponse, type CheckpointContainerRequest } from '../gen/runtime/v1/api.js';
import { invalidArgument } from '../common/errors.js';
import { requiredString } from './validate.js';
import type { ContainerService } from '../container/service.js';

/** Seconds a request may ask for at most (a day; the kubelet's default is its request timeout). */
const MAX_TIMEOUT_S = 86_400n;

export async function checkpointContainer(containers: Pick<ContainerService, 'checkpoint'>, req: CheckpointContainerRequest): Promise<CheckpointContainerResponse> {
  const id = requiredString(req.containerId, 'container_id');
  const location = requiredString(req.location, 'location');
  if (req.timeout < 0n || req.timeout > MAX_TIMEOUT_S) throw invalidArgument(`timeout ${req.timeout} must be between 0 (the default, 300 s) and ${MAX_TIMEOUT_S} seconds`);
  await containers.checkpoint(id, location, Number(req.timeout));
  return CheckpointContainerResponse.fromPartial({});
}
