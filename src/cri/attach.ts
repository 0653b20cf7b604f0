/** Attach: like Exec, to the container's own process; the URL of a session on the streaming server. */
import { AttachResponse, type AttachRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import { streamSelection, type Streaming } from './exec.js';

export async function attach(streaming: Pick<Streaming, 'attach'>, req: AttachRequest): Promise<AttachResponse> {
  const containerId = requiredString(req.containerId, 'container_id');
  const url = await streaming.attach({ containerId, ...streamSelection(req) });
  return AttachResponse.fromPartial({ url });
}
