/** ExecSync: run a command in a running container and return its output (probes, `crictl exec -s`). */
import { ExecSyncResponse, type ExecSyncRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import { invalidArgument } from '../common/errors.js';
import type { ContainerService } from '../container/service.js';

/** `signal`: the client left or its deadline passed; the command is killed then, as on its own timeout. */
export async function execSync(containers: ContainerService, req: ExecSyncRequest, signal?: AbortSignal): Promise<ExecSyncResponse> {
  const id = requiredString(req.containerId, 'container_id');
  if (req.cmd.length === 0 || req.cmd[0] === '') throw invalidArgument('cmd is required');
  if (req.timeout < 0n) throw invalidArgument(`timeout ${req.timeout} must not be negative`);
  const out = await containers.execSync(id, req.cmd, Number(req.timeout), signal);
  return ExecSyncResponse.fromPartial({ stdout: out.stdout, stderr: out.stderr, exitCode: out.exitCode });
}
