/** PortForward: the URL of a session that forwards the pod's ports (each checked here). */
import { PortForwardResponse, type PortForwardRequest } from '../gen/runtime/v1/api.js';
import { invalidArgument } from '../common/errors.js';
import { requiredString } from './validate.js';
import type { Streaming } from './exec.js';

export async function portForward(streaming: Pick<Streaming, 'portForward'>, req: PortForwardRequest): Promise<PortForwardResponse> {
  const podSandboxId = requiredString(req.podSandboxId, 'pod_sandbox_id');
  for (const port of req.port) {
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw invalidArgument(`port ${port} is not a valid port number`);
  }
  const url = await streaming.portForward({ podSandboxId, ports: [...req.port] });
  return PortForwardResponse.fromPartial({ url });
}
