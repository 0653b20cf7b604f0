/**
 * Exec, Attach, PortForward: check the request, turn it into the streaming server's parameters and
 * answer with the URL the server hands out (the session itself runs in streaming/).
 */
import {
  AttachResponse,
  ExecResponse,
  PortForwardResponse,
  type AttachRequest,
  type ExecRequest,
  type PortForwardRequest,
} from '../gen/runtime/v1/api.js';
import { invalidArgument } from '../common/errors.js';
import type { StreamSelection } from '../streaming/backend.js';
import type { StreamingServer } from '../streaming/server.js';
import { requiredString } from './validate.js';

/** The server's three entry points (a narrow view, so tests can pass a fake). */
type Streaming = Pick<StreamingServer, 'exec' | 'attach' | 'portForward'>;

export async function exec(streaming: Streaming, req: ExecRequest): Promise<ExecResponse> {
  const containerId = requiredString(req.containerId, 'container_id');
  if (req.cmd.length === 0) throw invalidArgument('cmd is required');
  const url = await streaming.exec({ containerId, cmd: [...req.cmd], ...streamSelection(req) });
  return ExecResponse.fromPartial({ url });
}

export async function attach(streaming: Streaming, req: AttachRequest): Promise<AttachResponse> {
  const containerId = requiredString(req.containerId, 'container_id');
  const url = await streaming.attach({ containerId, ...streamSelection(req) });
  return AttachResponse.fromPartial({ url });
}

export async function portForward(streaming: Streaming, req: PortForwardRequest): Promise<PortForwardResponse> {
  const podSandboxId = requiredString(req.podSandboxId, 'pod_sandbox_id');
  for (const port of req.port) {
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw invalidArgument(`port ${port} is not a valid port number`);
  }
  const url = await streaming.portForward({ podSandboxId, ports: [...req.port] });
  return PortForwardResponse.fromPartial({ url });
}

/** The streams an exec or attach asks for; a terminal merges stderr into stdout, so both is refused. */
function streamSelection(req: ExecRequest | AttachRequest): StreamSelection {
  if (req.tty && req.stderr) throw invalidArgument('tty and stderr cannot both be true');
  if (!req.stdin && !req.stdout && !req.stderr) throw invalidArgument('one of stdin, stdout, or stderr must be set');
  return { tty: req.tty, stdin: req.stdin, stdout: req.stdout, stderr: req.stderr };
}
