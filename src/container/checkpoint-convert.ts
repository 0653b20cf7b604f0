/**
 * Container records to a checkpoint archive's metadata (config.dump, status), and an archive's
 * checkpointed process into the config of the container restored from it.
 */
import { ContainerConfig } from '../gen/runtime/v1/api.js';
import { rfc3339Nano, GO_ZERO_TIME, type CheckpointMetadata, type ConfigDump, type ContainerdStatus } from '../checkpoint/archive.js';
import type { ContainerRecord } from './model.js';

/** checkpointctl's ContainerConfig of a container being checkpointed now. */
export function configDumpOf(r: ContainerRecord, runtimeName: string): ConfigDump {
  return {
    id: r.id,
    name: r.name,
    rootfsImage: r.image,
    rootfsImageRef: r.imageId,
    rootfsImageName: r.image,
    runtime: r.runtimeHandler || runtimeName,
    createdTime: rfc3339Nano(r.createdAt),
    checkpointedTime: new Date().toISOString(),
    restoredTime: r.restore ? rfc3339Nano(r.startedAt) : GO_ZERO_TIME,
    restored: r.restore !== undefined,
  };
}

/** containerd's status document, which checkpointctl reads for containerd-style archives. */
export function containerdStatusOf(r: ContainerRecord): ContainerdStatus {
  return {
    CreatedAt: Number(r.createdAt),
    StartedAt: Number(r.startedAt),
    FinishedAt: Number(r.finishedAt),
    ExitCode: r.exitCode,
    Pid: r.pid,
    Reason: r.reason,
    Message: r.message,
  };
}

/**
 * The config a restored container is created with: the request's (metadata, mounts, resources,
 * security context, labels, annotations, log path: the new pod's), with the process as checkpointed
 * (what CRIU brings back must be what the spec says: args, env, cwd, terminal).
 */
export function restoredConfig(requested: ContainerConfig, metadata: CheckpointMetadata): ContainerConfig {
  const p = metadata.process;
  return ContainerConfig.fromPartial({
    ...requested,
    command: p.args,
    args: [],
    workingDir: p.cwd,
    envs: p.env.map((e) => {
      const eq = e.indexOf('=');
      return eq < 0 ? { key: e, value: '' } : { key: e.slice(0, eq), value: e.slice(eq + 1) };
    }),
    tty: p.terminal,
  });
}
