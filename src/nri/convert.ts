/**
 * Stove's pods, containers and OCI specs as NRI's messages, and NRI resources back as CRI resources
 * (an update a plugin asks for is applied like UpdateContainerResources).
 */
import {
  ContainerState,
  LinuxResources as NriResources,
  type Container,
  type Hook,
  type Hooks,
  type PodSandbox,
} from '../gen/nri/api.js';
import { LinuxContainerResources, type LinuxContainerResources as CriResources } from '../gen/runtime/v1/api.js';
import { containerConfigOf, type ContainerRecord } from '../container/model.js';
import { podConfigOf, type SandboxRecord } from '../sandbox/model.js';
import type { LinuxResources as OciResources, OciHook, Spec } from '../oci/index.js';

export function podToNri(pod: SandboxRecord): PodSandbox {
  const config = podConfigOf(pod);
  return {
    id: pod.id,
    name: config.metadata?.name ?? '',
    uid: config.metadata?.uid ?? '',
    namespace: config.metadata?.namespace ?? '',
    labels: { ...config.labels },
    annotations: { ...config.annotations },
    runtimeHandler: pod.runtimeHandler,
    linux: {
      podOverhead: config.linux?.overhead ? criResourcesToNri(config.linux.overhead) : undefined,
      podResources: config.linux?.resources ? criResourcesToNri(config.linux.resources) : undefined,
      cgroupParent: pod.cgroupParent,
      cgroupsPath: pod.cgroupsPath,
      namespaces: Object.entries(pod.namespaces).map(([type, path]) => ({ type: type as string, path: path as string })),
      resources: undefined,
    },
    pid: pod.pausePid,
    ips: [...pod.ips],
  };
}

const STATES: Record<ContainerRecord['state'], ContainerState> = {
  created: ContainerState.CONTAINER_CREATED,
  running: ContainerState.CONTAINER_RUNNING,
  exited: ContainerState.CONTAINER_STOPPED,
};

/** A container from its record and the spec in its bundle (undefined when the bundle is gone). */
export function containerToNri(c: ContainerRecord, spec: Spec | undefined): Container {
  const config = containerConfigOf(c);
  return specToNri({
    id: c.id,
    sandboxId: c.sandboxId,
    name: config.metadata?.name ?? '',
    labels: config.labels,
    state: STATES[c.state],
    pid: c.pid,
    spec: spec ?? { ociVersion: '', annotations: config.annotations },
  });
}

/** A container as NRI describes it, from its OCI spec. */
export function specToNri(c: { id: string; sandboxId: string; name: string; labels: Record<string, string>; state: ContainerState; pid: number; spec: Spec }): Container {
  const { spec } = c;
  return {
    id: c.id,
    podSandboxId: c.sandboxId,
    name: c.name,
    state: c.state,
    labels: { ...c.labels },
    annotations: { ...(spec.annotations ?? {}) },
    args: [...(spec.process?.args ?? [])],
    env: [...(spec.process?.env ?? [])],
    mounts: (spec.mounts ?? []).map((m) => ({ destination: m.destination, type: m.type ?? '', source: m.source ?? '', options: [...(m.options ?? [])] })),
    hooks: hooksToNri(spec.hooks),
    linux: {
      namespaces: (spec.linux?.namespaces ?? []).map((n) => ({ type: n.type, path: n.path ?? '' })),
      devices: (spec.linux?.devices ?? []).map((d) => ({
        path: d.path,
        type: d.type,
        major: BigInt(d.major),
        minor: BigInt(d.minor),
        fileMode: d.fileMode === undefined ? undefined : { value: d.fileMode },
        uid: d.uid === undefined ? undefined : { value: d.uid },
        gid: d.gid === undefined ? undefined : { value: d.gid },
      })),
      resources: ociResourcesToNri(spec.linux?.resources),
      oomScoreAdj: spec.process?.oomScoreAdj === undefined ? undefined : { value: BigInt(spec.process.oomScoreAdj) },
      cgroupsPath: spec.linux?.cgroupsPath ?? '',
    },
    pid: c.pid,
    rlimits: (spec.process?.rlimits ?? []).map((r) => ({ type: r.type, hard: BigInt(r.hard), soft: BigInt(r.soft) })),
  };
}

function hookToNri(h: OciHook): Hook {
  return { path: h.path, args: [...(h.args ?? [])], env: [...(h.env ?? [])], timeout: h.timeout === undefined ? undefined : { value: BigInt(h.timeout) } };
}

function hooksToNri(h: Spec['hooks']): Hooks {
  return {
    prestart: (h?.prestart ?? []).map(hookToNri),
    createRuntime: (h?.createRuntime ?? []).map(hookToNri),
    createContainer: (h?.createContainer ?? []).map(hookToNri),
    startContainer: (h?.startContainer ?? []).map(hookToNri),
    poststart: (h?.poststart ?? []).map(hookToNri),
    poststop: (h?.poststop ?? []).map(hookToNri),
  };
}

const i64 = (v: number | bigint | undefined) => (v === undefined ? undefined : { value: BigInt(v) });

export function ociResourcesToNri(r: OciResources | undefined): NriResources {
  return NriResources.fromPartial({
    memory: {
      limit: i64(r?.memory?.limit),
      reservation: i64(r?.memory?.reservation),
      swap: i64(r?.memory?.swap),
      kernel: i64(r?.memory?.kernel),
      kernelTcp: i64(r?.memory?.kernelTCP),
      swappiness: i64(r?.memory?.swappiness),
      disableOomKiller: r?.memory?.disableOOMKiller === undefined ? undefined : { value: r.memory.disableOOMKiller },
      useHierarchy: r?.memory?.useHierarchy === undefined ? undefined : { value: r.memory.useHierarchy },
    },
    cpu: {
      shares: i64(r?.cpu?.shares),
      quota: i64(r?.cpu?.quota),
      period: i64(r?.cpu?.period),
      realtimeRuntime: i64(r?.cpu?.realtimeRuntime),
      realtimePeriod: i64(r?.cpu?.realtimePeriod),
      cpus: r?.cpu?.cpus ?? '',
      mems: r?.cpu?.mems ?? '',
    },
    hugepageLimits: (r?.hugepageLimits ?? []).map((h) => ({ pageSize: h.pageSize, limit: BigInt(h.limit) })),
    unified: { ...(r?.unified ?? {}) },
    devices: (r?.devices ?? []).map((d) => ({
      allow: d.allow,
      type: d.type ?? '',
      major: d.major === undefined ? undefined : { value: BigInt(d.major) },
      minor: d.minor === undefined ? undefined : { value: BigInt(d.minor) },
      access: d.access ?? '',
    })),
    pids: r?.pids ? { limit: BigInt(r.pids.limit) } : undefined,
  });
}

/** CRI resources (UpdateContainerResources) as NRI resources, for UpdateContainer. */
export function criResourcesToNri(r: CriResources): NriResources {
  const set = (v: bigint) => (v !== 0n ? { value: v } : undefined);
  return NriResources.fromPartial({
    memory: { limit: set(r.memoryLimitInBytes), swap: set(r.memorySwapLimitInBytes) },
    cpu: { shares: set(r.cpuShares), quota: set(r.cpuQuota), period: set(r.cpuPeriod), cpus: r.cpusetCpus, mems: r.cpusetMems },
    hugepageLimits: r.hugepageLimits.map((h) => ({ pageSize: h.pageSize, limit: h.limit })),
    unified: { ...r.unified },
  });
}

/**
 * NRI resources as CRI resources: what UpdateContainerResources can carry (CPU, memory limit and
 * swap, cpusets, hugepages, unified). Fields left unset stay zero and so keep the current value.
 */
export function nriResourcesToCri(r: NriResources | undefined): CriResources {
  return LinuxContainerResources.fromPartial({
    cpuPeriod: r?.cpu?.period?.value ?? 0n,
    cpuQuota: r?.cpu?.quota?.value ?? 0n,
    cpuShares: r?.cpu?.shares?.value ?? 0n,
    cpusetCpus: r?.cpu?.cpus ?? '',
    cpusetMems: r?.cpu?.mems ?? '',
    memoryLimitInBytes: r?.memory?.limit?.value ?? 0n,
    memorySwapLimitInBytes: r?.memory?.swap?.value ?? 0n,
    hugepageLimits: (r?.hugepageLimits ?? []).map((h) => ({ pageSize: h.pageSize, limit: h.limit })),
    unified: { ...(r?.unified ?? {}) },
  });
}
