/** A container record in the CRI's terms: ContainerStatus (status, events) and Container (listing). */
import { Container, ContainerState, ContainerStatus } from '../gen/runtime/v1/api.js';
import { DEFAULT_STOP_SIGNAL, toCriSignal } from '../container/stop-signal.js';
import { statusMounts } from '../container/image-volumes.js';
import { containerConfigOf, resourcesOf, type ContainerRecord, type ContainerStateName } from '../container/model.js';
import { oncePerObject } from '../common/memo.js';

const STATES: Record<ContainerStateName, ContainerState> = {
  created: ContainerState.CONTAINER_CREATED,
  running: ContainerState.CONTAINER_RUNNING,
  exited: ContainerState.CONTAINER_EXITED,
};

/** The CRI state of a record. */
export function criState(state: ContainerStateName): ContainerState {
  return STATES[state];
}

/**
 * ContainerStatus as the kubelet reads it (containerd's field choices), built once per record object
 * like toCriContainer (the kubelet asks for it far more often than a container changes).
 */
export const toContainerStatus = oncePerObject((record: ContainerRecord): ContainerStatus => {
  const config = containerConfigOf(record);
  const resources = resourcesOf(record);
  return ContainerStatus.fromPartial({
    id: record.id,
    metadata: config.metadata,
    state: criState(record.state),
    createdAt: record.createdAt,
    startedAt: record.startedAt,
    finishedAt: record.finishedAt,
    exitCode: record.exitCode,
    image: { ...(config.image ?? {}), image: record.image },
    imageRef: record.imageRef,
    imageId: record.imageId,
    reason: record.reason,
    message: record.message,
    labels: config.labels,
    annotations: config.annotations,
    mounts: statusMounts(config.mounts, record.imageVolumes),
    logPath: record.logPath,
    stopSignal: toCriSignal(record.stopSignal || DEFAULT_STOP_SIGNAL),
    resources: resources ? { linux: resources } : undefined,
    user: {
      linux: {
        uid: BigInt(record.user.uid),
        gid: BigInt(record.user.gid),
        supplementalGroups: record.user.additionalGids.map((g) => BigInt(g)),
      },
    },
  });
});

/**
 * The ListContainers entry of a record, built once per record object (records are replaced on every
 * change, so the cache never goes stale; callers must not modify the result).
 */
export const toCriContainer = oncePerObject((record: ContainerRecord): Container => {
  const config = containerConfigOf(record);
  return Container.fromPartial({
    id: record.id,
    podSandboxId: record.sandboxId,
    metadata: config.metadata,
    image: { ...(config.image ?? {}), image: record.image },
    imageRef: record.imageRef,
    imageId: record.imageId,
    state: criState(record.state),
    createdAt: record.createdAt,
    labels: config.labels,
    annotations: config.annotations,
  });
});
