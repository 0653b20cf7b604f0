/** CreateContainer: checks the config, then the pod coordinator creates it under the pod's lock. */
import { isUtf8 } from 'node:buffer';
import { CreateContainerResponse, type CreateContainerRequest } from '../gen/runtime/v1/api.js';
import { CreateContainerEnvs } from '../gen/stove/v1/wire.js';
import { required, requiredString } from './validate.js';
import { validateLinuxResources } from './validate-resources.js';
import { invalidArgument } from '../common/errors.js';
import type { PodLifecycle } from '../pod/lifecycle.js';
import { requestedDevices } from '../cdi/index.js';

/**
 * `requestBytes`: the request as sent, for the env values as bytes (they are `bytes` from cri-api
 * v0.37 on; the decoded request holds them as strings, invalid UTF-8 already replaced). `signal`: the
 * client left or its deadline passed; a container whose creation it never learns of is removed again
 * (ContainerService.create).
 */
export async function createContainer(
  pods: Pick<PodLifecycle, 'createContainer'>,
  req: CreateContainerRequest,
  requestBytes: Buffer,
  signal?: AbortSignal,
): Promise<CreateContainerResponse> {
  const podSandboxId = requiredString(req.podSandboxId, 'pod_sandbox_id');
  const config = required(req.config, 'config');
  const meta = required(config.metadata, 'config.metadata');
  requiredString(meta.name, 'config.metadata.name');
  if (meta.attempt < 0) throw invalidArgument(`config.metadata.attempt ${meta.attempt} must not be negative`);
  requiredString(config.image?.image, 'config.image.image');
  checkEnvValues(requestBytes, meta.name);
  validateLinuxResources(config.linux?.resources, 'config.linux.resources');
  // Malformed CDI device names are refused before any work; unknown ones when the spec is built.
  requestedDevices(config.CDIDevices.map((d) => d.name), config.annotations);
  const record = await pods.createContainer(podSandboxId, config, req.sandboxConfig, signal);
  return CreateContainerResponse.fromPartial({ containerId: record.id });
}

/**
 * Every env value must reach the process as sent, or the container is refused: a value that is not
 * UTF-8 (a Secret's binary data) cannot, because the OCI runtime spec is JSON and JSON strings hold
 * only Unicode text — runc reads config.json with Go's encoding/json, which turns each invalid byte
 * into U+FFFD, and crun refuses such a file. A NUL byte ends a C string: no process can get it.
 * The message names the variable, never its value (it may be a secret).
 */
export function checkEnvValues(requestBytes: Buffer, containerName: string): void {
  const envs = CreateContainerEnvs.decode(requestBytes).config?.envs ?? [];
  for (const { key, value } of envs) {
    const where = `environment variable "${key}" of container "${containerName}"`;
    if (!isUtf8(value)) {
      throw invalidArgument(
        `${where}: its value is binary data, not UTF-8 text, which the OCI runtime spec (JSON) cannot carry to the process unchanged ` +
          `(runc would replace every invalid byte with U+FFFD); encode it, e.g. as base64, in the Secret or ConfigMap`,
      );
    }
    if (value.includes(0)) throw invalidArgument(`${where}: its value contains a NUL byte, which no process environment can hold`);
  }
}
