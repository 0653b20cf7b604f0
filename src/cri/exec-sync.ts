/** ExecSync: run a command in a running container and return its output (probes, `crictl exec -s`). */
import { ExecSyncResponse, type ExecSyncRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import { invalidArgument } from '../common/errors.js';
import type { ContainerService } from '../container/service.js';

export async function execSync(containers: ContainerService, req: ExecSyncRequest): Promise<ExecSyncResponse> {
  const id = requiredString(req.containerId, 'container_id');
  if (req.cmd.length === 0 || req.cmd[0] === '') throw invalidArgument('cmd is required');
  if (req.timeout < 0n) throw invalidArgument(`timeout ${req.timeout} must not be negative`);
  const out = await containers.execSync(id, req.cmd, Number(req.timeout));
  return ExecSyncResponse.fromPartial({ stdout: out.stdout, stderr: out.stderr, exitCode: out.exitCode });
}
