/** PodSandboxStatus: NOT_FOUND for an unknown pod; a dead pause process is noticed on the way. */
import { stringifyInt64Json } from '../common/json.js';
import { PodSandboxStatusResponse, type PodSandboxStatusRequest } from '../gen/runtime/v1/api.js';
import { encodeAsParts, responsePerKey } from '../api/wire-reuse.js';
import { requiredString } from './validate.js';
import { nowNs } from '../common/clock.js';
import type { PauseState, SandboxRecord } from '../sandbox/model.js';
import { toPodSandboxStatus } from './sandbox-convert.js';
import { toContainerStatus } from './container-convert.js';
import type { ContainerRecord } from '../container/model.js';
import type { PodLifecycle } from '../pod/lifecycle.js';
import type { SandboxReads } from './list-pod-sandbox.js';

/** The status part of a PodSandboxStatus answer, one per record object. */
const statusPart = responsePerKey((record: SandboxRecord) => PodSandboxStatusResponse.fromPartial({ status: toPodSandboxStatus(record) }));

/** One container's entry of containers_statuses, one per container record object (encoded once). */
const containerPart = responsePerKey((record: ContainerRecord) => PodSandboxStatusResponse.fromPartial({ containersStatuses: [toContainerStatus(record)] }));

/**
 * NOT_FOUND for an unknown pod; `verbose` adds `info["info"]`, a JSON document like containerd's. The
 * answer carries a timestamp and, with it, the statuses of all the pod's containers: a kubelet with the
 * EventedPLEG gate takes a timestamped answer's containers_statuses as the pod's containers (and would
 * start the pod's containers again, and again, from an answer without them).
 */
export async function podSandboxStatus(
  d: { pods: Pick<PodLifecycle, 'status'>; sandboxes: SandboxReads; containersOf: (sandboxId: string) => readonly ContainerRecord[] },
  req: PodSandboxStatusRequest,
): Promise<PodSandboxStatusResponse> {
  const { record, pause } = await d.pods.status(requiredString(req.podSandboxId, 'pod_sandbox_id'));
  const info: Record<string, string> = {};
  if (req.verbose) info.info = stringifyInt64Json(await verboseInfo(d.sandboxes, record, pause));
  // The status and each container's status are encoded once per record; the timestamp (and info) of
  // each call follow them.
  const brief = statusPart(record);
  const containers = d.containersOf(record.id).map(containerPart);
  const fresh = PodSandboxStatusResponse.fromPartial({ info, timestamp: nowNs() });
  const answer = { ...fresh, status: brief.status, containersStatuses: containers.map((part) => part.containersStatuses[0]!) };
  return encodeAsParts(answer, [brief, ...containers, fresh]);
}

/** `pause`: the state of the pause process if the status call checked it already. */
async function verboseInfo(sandboxes: SandboxReads, record: SandboxRecord, pause: PauseState | undefined): Promise<Record<string, unknown>> {
  const [processStatus, runtimeSpec, network] = await Promise.all([
    pause ?? sandboxes.pauseState(record),
    sandboxes.pauseSpec(record),
    sandboxes.networkStatus(record.id),
  ]);
  return {
    pid: record.pausePid,
    processStatus,
    conmonPid: record.conmonPid,
    netNamespaceClosed: !network,
    netnsPath: record.netnsPath,
    namespaces: record.namespaces,
    image: 'stove/pause',
    runtimeHandler: record.runtimeHandler || 'runc',
    hostname: record.hostname,
    cgroupParent: record.cgroupParent,
    cgroupsPath: record.cgroupsPath,
    podFiles: record.files,
    ...(record.resize ? { resize: record.resize } : {}),
    ...(record.exit ? { exitCode: record.exit.code, finishedAt: record.exit.finishedAt.toString() } : {}),
    config: record.config,
    runtimeSpec,
    cniResult: network?.result,
  };
}
