/** CreateContainer: checks the config, then the pod coordinator creates it under the pod's lock. */
import { CreateContainerResponse, type CreateContainerRequest } from '../gen/runtime/v1/api.js';
import { required, requiredString } from './validate.js';
import { validateLinuxResources } from './validate-resources.js';
import { invalidArgument } from '../common/errors.js';
import type { PodLifecycle } from '../pod/lifecycle.js';
import { requestedDevices } from '../cdi/index.js';

export async function createContainer(pods: Pick<PodLifecycle, 'createContainer'>, req: CreateContainerRequest): Promise<CreateContainerResponse> {
  const podSandboxId = requiredString(req.podSandboxId, 'pod_sandbox_id');
  const config = required(req.config, 'config');
  const meta = required(config.metadata, 'config.metadata');
  requiredString(meta.name, 'config.metadata.name');
  if (meta.attempt < 0) throw invalidArgument(`config.metadata.attempt ${meta.attempt} must not be negative`);
  requiredString(config.image?.image, 'config.image.image');
  validateLinuxResources(config.linux?.resources, 'config.linux.resources');
  // Malformed CDI device names are refused before any work; unknown ones when the spec is built.
  requestedDevices(config.CDIDevices.map((d) => d.name), config.annotations);
  const record = await pods.createContainer(podSandboxId, config, req.sandboxConfig);
  return CreateContainerResponse.fromPartial({ containerId: record.id });
}
