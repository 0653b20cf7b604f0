/** UpdateRuntimeConfig: the pod CIDR the kubelet pushes (an empty one changes nothing). */
import { UpdateRuntimeConfigResponse, type UpdateRuntimeConfigRequest } from '../gen/runtime/v1/api.js';
import type { RuntimeInfo } from './runtime-info.js';

export async function updateRuntimeConfig(info: RuntimeInfo, req: UpdateRuntimeConfigRequest): Promise<UpdateRuntimeConfigResponse> {
  const cidr = req.runtimeConfig?.networkConfig?.podCidr ?? '';
  if (cidr && info.setPodCidr(cidr)) info.deps.log.info('pod CIDR updated', { podCidr: cidr });
  return UpdateRuntimeConfigResponse.fromPartial({});
}
