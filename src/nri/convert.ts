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
  LinuxSeccomp as NriSeccomp,
  SecurityProfile_ProfileType,
  type SecurityProfile,
  type PodSandbox,
} from '../gen/nri/api.js';
import { LinuxContainerResources, type ContainerConfig, type LinuxContainerResources as CriResources } from '../gen/runtime/v1/api.js';
import { containerConfigOf, type ContainerRecord } from '../container/model.js';
import { podConfigOf, type SandboxRecord } from '../sandbox/model.js';
import { nriIoPriority, nriScheduler } from './linux-fields.js';
import { selectSeccomp, type LinuxResources as OciResources, type LinuxSeccomp as OciSeccomp, type OciHook, type Spec } from '../oci/index.js';

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
  return withStatus(
    specToNri({
      id: c.id,
      sandboxId: c.sandboxId,
      name: config.metadata?.name ?? '',
      labels: config.labels,
      state: STATES[c.state],
      pid: c.pid,
      spec: spec ?? { ociVersion: '', annotations: config.annotations },
      cdiDevices: config.CDIDevices.map((d) => d.name),
      seccompProfile: seccompProfileOf(config),
      image: { name: c.image, digest: c.imageRef.includes('@') ? c.imageRef.slice(c.imageRef.indexOf('@') + 1) : '', configDigest: c.imageId },
    }),
    c,
  );
}

/** The record's state and times (NRI v0.12's status fields): created/started/finished in Unix ns. */
export function withStatus(n: Container, c: ContainerRecord): Container {
  return {
    ...n,
    state: STATES[c.state],
    pid: c.pid,
    createdAt: c.createdAt,
    startedAt: c.startedAt,
    finishedAt: c.finishedAt,
    exitCode: c.exitCode,
    statusReason: c.reason,
    statusMessage: c.message,
  };
}

/** A container as NRI describes it, from its OCI spec. */
export function specToNri(c: {
  id: string;
  sandboxId: string;
  name: string;
  labels: Record<string, string>;
  state: ContainerState;
  pid: number;
  spec: Spec;
  cdiDevices?: string[];
  image?: { name: string; digest: string; configDigest: string };
  seccompProfile?: SecurityProfile;
}): Container {
  const { spec } = c;
  const user = spec.process?.user;
  const rdt = spec.linux?.intelRdt;
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
      ioPriority: nriIoPriority(spec.process?.ioPriority),
      seccompProfile: c.seccompProfile,
      seccompPolicy: spec.linux?.seccomp ? seccompToNri(spec.linux.seccomp) : undefined,
      sysctl: { ...(spec.linux?.sysctl ?? {}) },
      netDevices: Object.fromEntries(Object.entries(spec.linux?.netDevices ?? {}).map(([k, v]) => [k, { name: v.name ?? '' }])),
      scheduler: nriScheduler(spec.process?.scheduler),
      rdt: rdt
        ? {
            closId: rdt.closID === undefined ? undefined : { value: rdt.closID },
            schemata: rdt.schemata === undefined ? undefined : { value: [...rdt.schemata] },
            enableMonitoring: rdt.enableMonitoring === undefined ? undefined : { value: rdt.enableMonitoring },
            remove: false,
          }
        : undefined,
    },
    pid: c.pid,
    rlimits: (spec.process?.rlimits ?? []).map((r) => ({ type: r.type, hard: BigInt(r.hard), soft: BigInt(r.soft) })),
    createdAt: 0n,
    startedAt: 0n,
    finishedAt: 0n,
    exitCode: 0,
    statusReason: '',
    statusMessage: '',
    CDIDevices: (c.cdiDevices ?? []).map((name) => ({ name })),
    user: user ? { uid: user.uid, gid: user.gid, additionalGids: [...(user.additionalGids ?? [])] } : undefined,
    image: c.image,
  };
}

/**
 * The kind of seccomp profile the CRI asked for (NRI's `seccomp_profile`, which the default validator
 * judges seccomp adjustments by): as the spec was made (oci/seccomp.ts), unconfined when unset.
 */
export function seccompProfileOf(config: ContainerConfig): SecurityProfile | undefined {
  const sc = config.linux?.securityContext;
  try {
    const choice = selectSeccomp(sc?.seccomp, sc?.seccompProfilePath ?? '', sc?.privileged ?? false);
    if (choice.kind === 'runtime-default') return { profileType: SecurityProfile_ProfileType.RUNTIME_DEFAULT, localhostRef: '' };
    if (choice.kind === 'unconfined') return { profileType: SecurityProfile_ProfileType.UNCONFINED, localhostRef: '' };
    return { profileType: SecurityProfile_ProfileType.LOCALHOST, localhostRef: choice.path };
  } catch {
    return undefined;
  }
}

function seccompToNri(s: OciSeccomp): NriSeccomp {
  const u32 = (v: number | undefined) => (v === undefined ? undefined : { value: v });
  return {
    defaultAction: s.defaultAction,
    defaultErrno: u32(s.defaultErrnoRet),
    architectures: [...(s.architectures ?? [])],
    flags: [...(s.flags ?? [])],
    listenerPath: s.listenerPath ?? '',
    listenerMetadata: s.listenerMetadata ?? '',
    syscalls: (s.syscalls ?? []).map((sc) => ({
      names: [...sc.names],
      action: sc.action,
      errnoRet: u32(sc.errnoRet),
      args: (sc.args ?? []).map((a) => ({ index: a.index, value: BigInt(a.value), valueTwo: BigInt(a.valueTwo ?? 0), op: a.op })),
    })),
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
