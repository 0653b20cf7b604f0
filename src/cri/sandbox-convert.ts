/** A sandbox record in the CRI's terms: PodSandboxStatus (status RPC, events). */
import { PodSandboxState, PodSandboxStatus } from '../gen/runtime/v1/api.js';
import { podConfigOf, type SandboxRecord } from '../sandbox/model.js';

/** The CRI state of a record. */
export function criPodState(record: SandboxRecord): PodSandboxState {
  return record.state === 'ready' ? PodSandboxState.SANDBOX_READY : PodSandboxState.SANDBOX_NOTREADY;
}

/** PodSandboxStatus as the kubelet reads it. */
export function toPodSandboxStatus(record: SandboxRecord): PodSandboxStatus {
  const config = podConfigOf(record);
  const [primary = '', ...additional] = record.ips;
  return PodSandboxStatus.fromPartial({
    id: record.id,
    metadata: config.metadata,
    state: criPodState(record),
    createdAt: record.createdAt,
    network: { ip: primary, additionalIps: additional.map((ip) => ({ ip })) },
    linux: { namespaces: { options: config.linux?.securityContext?.namespaceOptions ?? {} } },
    labels: config.labels,
    annotations: config.annotations,
    runtimeHandler: record.runtimeHandler,
  });
}
