/**
 * The OCI runtime spec (`config.json`, runtime-spec v1.0.2/v1.1, Linux parts only) and the OCI image
 * config, as plain TypeScript types. Field names are the JSON names, so a Spec serialises as-is with
 * `JSON.stringify`. Optional fields are left out rather than set to null: runc treats a present-but-empty
 * object differently from an absent one in places (e.g. `linux.seccomp`).
 *
 * Numbers: the spec's int64/uint64 fields are JS numbers here, except the resource limits a kubelet may
 * send as "no limit" (cgroup v1's 9223372036854771712 bytes and the like): those are `SpecInt`, a bigint
 * when a double cannot hold the value exactly (`toSpecNumber`, resources.ts). `specToJson` writes a bigint
 * as its exact digits, as runc's Go decoder needs them, and `readBundleSpec` reads such numbers back as
 * bigint.
 */

/** An int64/uint64 spec field: a number while it is a safe integer, else a bigint. */
export type SpecInt = number | bigint;

/** `config.json`. */
export interface Spec {
  ociVersion: string;
  process?: Process;
  root?: Root;
  hostname?: string;
  domainname?: string;
  mounts?: Mount[];
  annotations?: Record<string, string>;
  hooks?: Hooks;
  linux?: Linux;
}

/** A program the runtime runs at a lifecycle stage, with the container's state on stdin. */
export interface Hook {
  /** Absolute, on the host. */
  path: string;
  args?: string[];
  env?: string[];
  /** Seconds. */
  timeout?: number;
}

/** Hooks by stage (runtime-spec 1.0.2; `prestart` is the deprecated name of an early createRuntime). */
export interface Hooks {
  prestart?: Hook[];
  createRuntime?: Hook[];
  createContainer?: Hook[];
  startContainer?: Hook[];
  poststart?: Hook[];
  poststop?: Hook[];
}

export type HookStage = keyof Hooks;

export interface Root {
  /** Absolute, or relative to the bundle directory. */
  path: string;
  readonly?: boolean;
}

export interface Process {
  terminal?: boolean;
  consoleSize?: { height: number; width: number };
  user: User;
  args: string[];
  env?: string[];
  cwd: string;
  capabilities?: LinuxCapabilities;
  rlimits?: POSIXRlimit[];
  noNewPrivileges?: boolean;
  apparmorProfile?: string;
  oomScoreAdj?: number;
  selinuxLabel?: string;
  /** The I/O priority of the container's process group (runtime-spec 1.1). */
  ioPriority?: IOPriority;
  /** The scheduling policy of the container's process (runtime-spec 1.1, `sched_setattr(2)`). */
  scheduler?: Scheduler;
}

/** `process.ioPriority`: a class and a level 0 (highest) to 7 (lowest). */
export interface IOPriority {
  class: 'IOPRIO_CLASS_RT' | 'IOPRIO_CLASS_BE' | 'IOPRIO_CLASS_IDLE';
  priority: number;
}

/** `process.scheduler`: `sched_setattr(2)`'s policy, nice, priority, flags and deadline parameters. */
export interface Scheduler {
  policy: string;
  nice?: number;
  priority?: number;
  flags?: string[];
  /** Nanoseconds (SCHED_DEADLINE). */
  runtime?: SpecInt;
  deadline?: SpecInt;
  period?: SpecInt;
}

export interface User {
  uid: number;
  gid: number;
  umask?: number;
  additionalGids?: number[];
}

export interface LinuxCapabilities {
  bounding?: string[];
  effective?: string[];
  inheritable?: string[];
  permitted?: string[];
  ambient?: string[];
}

export interface POSIXRlimit {
  type: string;
  hard: number;
  soft: number;
}

export interface Mount {
  destination: string;
  type?: string;
  source?: string;
  options?: string[];
  uidMappings?: LinuxIDMapping[];
  gidMappings?: LinuxIDMapping[];
}

export interface Linux {
  uidMappings?: LinuxIDMapping[];
  gidMappings?: LinuxIDMapping[];
  sysctl?: Record<string, string>;
  resources?: LinuxResources;
  cgroupsPath?: string;
  namespaces?: LinuxNamespace[];
  devices?: LinuxDevice[];
  seccomp?: LinuxSeccomp;
  rootfsPropagation?: string;
  maskedPaths?: string[];
  readonlyPaths?: string[];
  mountLabel?: string;
  intelRdt?: LinuxIntelRdt;
  /** Host network interfaces moved into the container's network namespace, by host name (runtime-spec 1.3). */
  netDevices?: Record<string, LinuxNetDevice>;
}

/** Intel RDT (resctrl) class of service: runtime-spec 1.0.2's fields, and 1.3's `schemata` and `enableMonitoring`. */
export interface LinuxIntelRdt {
  closID?: string;
  l3CacheSchema?: string;
  memBwSchema?: string;
  enableCMT?: boolean;
  enableMBM?: boolean;
  schemata?: string[];
  enableMonitoring?: boolean;
}

/** A host network interface in the container (runtime-spec 1.3 `linux.netDevices` value). */
export interface LinuxNetDevice {
  /** Its name in the container; the host name when absent. */
  name?: string;
}

export interface LinuxIDMapping {
  containerID: number;
  hostID: number;
  size: number;
}

export type LinuxNamespaceType = 'pid' | 'network' | 'mount' | 'ipc' | 'uts' | 'user' | 'cgroup' | 'time';

export interface LinuxNamespace {
  type: LinuxNamespaceType;
  /** Join this existing namespace (`/proc/<pid>/ns/net`, a pinned netns); absent = create a new one. */
  path?: string;
}

/** A device node created in the container's /dev. */
export interface LinuxDevice {
  path: string;
  /** `c` (char), `b` (block), `u` (unbuffered char), `p` (FIFO). */
  type: string;
  major: number;
  minor: number;
  fileMode?: number;
  uid?: number;
  gid?: number;
}

export interface LinuxResources {
  devices?: LinuxDeviceCgroup[];
  memory?: LinuxMemory;
  cpu?: LinuxCPU;
  pids?: LinuxPids;
  hugepageLimits?: LinuxHugepageLimit[];
  /** cgroup v2 files, `memory.high` → value. */
  unified?: Record<string, string>;
  blockIO?: LinuxBlockIO;
}

export interface LinuxBlockIO {
  weight?: number;
  leafWeight?: number;
  weightDevice?: { major: number; minor: number; weight?: number; leafWeight?: number }[];
  throttleReadBpsDevice?: LinuxThrottleDevice[];
  throttleWriteBpsDevice?: LinuxThrottleDevice[];
  throttleReadIOPSDevice?: LinuxThrottleDevice[];
  throttleWriteIOPSDevice?: LinuxThrottleDevice[];
}

export interface LinuxThrottleDevice {
  major: number;
  minor: number;
  rate: number;
}

/** A device cgroup rule; `type`/`major`/`minor` absent match every device. */
export interface LinuxDeviceCgroup {
  allow: boolean;
  type?: string;
  major?: number;
  minor?: number;
  access?: string;
}

export interface LinuxMemory {
  limit?: SpecInt;
  reservation?: SpecInt;
  /** Memory plus swap (cgroup v1 `memsw`); runc converts it for v2. */
  swap?: SpecInt;
  kernel?: number;
  swappiness?: number;
  disableOOMKiller?: boolean;
  kernelTCP?: number;
  useHierarchy?: boolean;
}

export interface LinuxCPU {
  shares?: number;
  quota?: SpecInt;
  period?: number;
  realtimeRuntime?: number;
  realtimePeriod?: number;
  cpus?: string;
  mems?: string;
}

export interface LinuxPids {
  limit: number;
}

export interface LinuxHugepageLimit {
  pageSize: string;
  limit: SpecInt;
}

export type SeccompAction =
  | 'SCMP_ACT_KILL'
  | 'SCMP_ACT_KILL_PROCESS'
  | 'SCMP_ACT_KILL_THREAD'
  | 'SCMP_ACT_TRAP'
  | 'SCMP_ACT_ERRNO'
  | 'SCMP_ACT_TRACE'
  | 'SCMP_ACT_ALLOW'
  | 'SCMP_ACT_LOG'
  | 'SCMP_ACT_NOTIFY';

export type SeccompOperator =
  | 'SCMP_CMP_NE'
  | 'SCMP_CMP_LT'
  | 'SCMP_CMP_LE'
  | 'SCMP_CMP_EQ'
  | 'SCMP_CMP_GE'
  | 'SCMP_CMP_GT'
  | 'SCMP_CMP_MASKED_EQ';

export interface LinuxSeccomp {
  defaultAction: SeccompAction;
  defaultErrnoRet?: number;
  architectures?: string[];
  flags?: string[];
  listenerPath?: string;
  listenerMetadata?: string;
  syscalls?: LinuxSyscall[];
}

export interface LinuxSyscall {
  names: string[];
  action: SeccompAction;
  errnoRet?: number;
  args?: LinuxSeccompArg[];
}

export interface LinuxSeccompArg {
  index: number;
  value: number;
  valueTwo?: number;
  op: SeccompOperator;
}

/**
 * The `config` object of an OCI image config (image-spec `application/vnd.oci.image.config.v1+json`),
 * which Docker images share. Every field may be missing.
 */
export interface ImageConfig {
  User?: string;
  ExposedPorts?: Record<string, object>;
  Env?: string[];
  Entrypoint?: string[] | null;
  Cmd?: string[] | null;
  Volumes?: Record<string, object>;
  WorkingDir?: string;
  Labels?: Record<string, string>;
  StopSignal?: string;
  ArgsEscaped?: boolean;
}

/** The whole image config blob: what the `config` descriptor of a manifest points to. */
export interface ImageConfigFile {
  architecture?: string;
  os?: string;
  variant?: string;
  created?: string;
  author?: string;
  config?: ImageConfig;
  rootfs?: { type: string; diff_ids: string[] };
  history?: { created?: string; created_by?: string; comment?: string; empty_layer?: boolean }[];
}
