/**
 * Exec: checks the request, turns it into the streaming server's parameters and answers with the URL
 * the server hands out (the session itself runs in streaming/).
 */
import { ExecResponse, type AttachRequest, type ExecRequest } from '../gen/runtime/v1/api.js';
import { invalidArgument } from '../common/errors.js';
import type { StreamSelection } from '../streaming/backend.js';
import type { StreamingServer } from '../streaming/server.js';
import { requiredString } from './validate.js';

/** The server's entry points (a narrow view, so tests can pass a fake). */
export type Streaming = Pick<StreamingServer, 'exec' | 'attach' | 'portForward'>;

export async function exec(streaming: Pick<Streaming, 'exec'>, req: ExecRequest): Promise<ExecResponse> {
  const containerId = requiredString(req.containerId, 'container_id');
  if (req.cmd.length === 0) throw invalidArgument('cmd is required');
  const url = await streaming.exec({ containerId, cmd: [...req.cmd], ...streamSelection(req) });
  return ExecResponse.fromPartial({ url });
}

/** The streams an exec or attach asks for; a terminal merges stderr into stdout, so both is refused. */
export function streamSelection(req: ExecRequest | AttachRequest): StreamSelection {
  if (req.tty && req.stderr) throw invalidArgument('tty and stderr cannot both be true');
  if (!req.stdin && !req.stdout && !req.stderr) throw invalidArgument('one of stdin, stdout, or stderr must be set');
  return { tty: req.tty, stdin: req.stdin, stdout: req.stdout, stderr: req.stderr };
}
