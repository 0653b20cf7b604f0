/** ContainerStatus: the status of one container; `verbose` adds what `crictl inspect` shows. */
import { stringifyInt64Json } from '../common/json.js';
import { ContainerStatusResponse, type ContainerStatusRequest } from '../gen/runtime/v1/api.js';
import { responsePerKey } from '../api/wire-reuse.js';
import { requiredString } from './validate.js';
import { toContainerStatus } from './container-convert.js';
import { containerConfigOf, type ContainerRecord } from '../container/model.js';
import type { ContainerService } from '../container/service.js';

/** The answer without `verbose`: one per record object, encoded once. */
const briefStatus = responsePerKey((record: ContainerRecord) => ContainerStatusResponse.fromPartial({ status: toContainerStatus(record) }));

export async function containerStatus(containers: ContainerService, req: ContainerStatusRequest): Promise<ContainerStatusResponse> {
  const record = containers.get(requiredString(req.containerId, 'container_id'));
  if (!req.verbose) return briefStatus(record);
  const info = { info: stringifyInt64Json(await verboseInfo(containers, record)) };
  return ContainerStatusResponse.fromPartial({ status: toContainerStatus(record), info });
}

/** What `crictl inspect` shows beyond the status (containerd's `info` keys where they apply, CRI-O's for restores). */
async function verboseInfo(containers: ContainerService, r: ContainerRecord): Promise<Record<string, unknown>> {
  const config = containerConfigOf(r);
  return {
    sandboxID: r.sandboxId,
    pid: r.pid,
    conmonPid: r.conmonPid,
    runtimeHandler: r.runtimeHandler || 'runc',
    runtimeBinary: containers.runtimeOf(r).binary,
    bundle: r.bundleDir,
    rootfs: r.rootfsDir,
    cgroupsPath: r.cgroupsPath,
    ...(r.imageVolumes ? { imageVolumes: r.imageVolumes } : {}),
    privileged: config.linux?.securityContext?.privileged ?? false,
    ...r.specEdits,
    // CRI-O's keys: restored from a checkpoint archive, and when that checkpoint was taken.
    ...(r.restore ? { restored: true, checkpointedAt: r.restore.checkpointedAt, restoredFrom: r.restore.archive } : {}),
    runtimeSpec: await containers.specOf(r),
  };
}
