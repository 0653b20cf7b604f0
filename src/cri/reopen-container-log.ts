/** ReopenContainerLog: conmon reopens the log file after the kubelet renamed it. */
import { ReopenContainerLogResponse, type ReopenContainerLogRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import type { ContainerService } from '../container/service.js';

export async function reopenContainerLog(containers: Pick<ContainerService, 'reopenLog'>, req: ReopenContainerLogRequest): Promise<ReopenContainerLogResponse> {
  await containers.reopenLog(requiredString(req.containerId, 'container_id'));
  return ReopenContainerLogResponse.fromPartial({});
}
