/**
 * Applies the merged ContainerAdjustment of NRI plugins to a container's OCI spec, the way containerd's
 * NRI spec generator does: annotations and env set or removed by key, hooks appended, devices replaced
 * by path (with a device cgroup rule allowing them), mounts replaced by destination and sorted by depth,
 * resources laid over field by field, cgroups path, OOM score adjustment and rlimits (replaced by type);
 * of NRI v0.10 to v0.12's: args replaced, sysctls set or removed by key, namespaces set or removed by
 * type, the seccomp filter replaced, the I/O priority and scheduling policy set, network devices set or
 * removed by host name, RDT settings laid over the RDT class's. (The memory policy is refused when
 * merged, result.ts, which also checks the runtime implements what these need.)
 */
import type {
  ContainerAdjustment,
  Hook,
  LinuxDevice,
  LinuxNamespace as NriNamespace,
  LinuxNetDevice,
  LinuxRdt,
  LinuxResources as NriResources,
  LinuxSeccomp as NriSeccomp,
  Mount,
} from '../gen/nri/api.js';
import { failedPrecondition, invalidArgument } from '../common/errors.js';
import type { LinuxSeccomp, OciHook, OciMount, ResourceHost, Spec } from '../oci/index.js';
import { readMountInfo } from '../platform/proc.js';
import { MAX_NET_DEVICES, describeRdt, ociIoPriority, ociScheduler, rdtSetsAnything } from './linux-fields.js';
import { removalKey } from './result.js';

/** What the host offers for the parts of an adjustment that need more than the spec. */
export interface AdjustHost {
  cgroups: ResourceHost;
  /**
   * Injects CDI devices by fully qualified name, for a container of a pod of `runtimeHandler` (whose OCI
   * runtime decides which CDI edits can be applied); absent when Stove has no CDI registry.
   */
  injectCdiDevices?: (spec: Spec, names: string[], runtimeHandler: string) => Promise<void>;
  /** The runtime handler of the container's pod ('' = the default). */
  runtimeHandler?: string;
  /** Told of settings accepted but not applied. */
  warn?: (message: string) => void;
  /** Whether the resctrl filesystem is mounted (RDT settings need it); by default from /proc/self/mountinfo. */
  resctrlMounted?: () => Promise<boolean>;
}

const resctrlMounted = async () => (await readMountInfo()).some((m) => m.fsType === 'resctrl');

/** Applies `adjust` to `spec` in place. Refusals are INVALID_ARGUMENT naming the setting. */
export async function applyAdjustment(spec: Spec, adjust: ContainerAdjustment | undefined, host: AdjustHost): Promise<void> {
  if (!adjust) return;
  adjustAnnotations(spec, adjust.annotations ?? {});
  adjustEnv(spec, adjust.env ?? []);
  adjustHooks(spec, adjust.hooks);
  if (adjust.CDIDevices?.length) {
    const names = adjust.CDIDevices.map((d) => d.name);
    if (!host.injectCdiDevices) throw invalidArgument(`CDI devices ${names.join(', ')} requested, but Stove has no CDI device registry`);
    await host.injectCdiDevices(spec, names, host.runtimeHandler ?? '');
  }
  const linux = adjust.linux;
  if (linux) {
    adjustDevices(spec, linux.devices ?? []);
    if (linux.cgroupsPath) (spec.linux ??= {}).cgroupsPath = linux.cgroupsPath;
    if (linux.oomScoreAdj) processOf(spec).oomScoreAdj = Number(linux.oomScoreAdj.value);
    if (linux.ioPriority) processOf(spec).ioPriority = ociIoPriority(linux.ioPriority);
    if (linux.scheduler) {
      const scheduler = ociScheduler(linux.scheduler);
      if (scheduler) processOf(spec).scheduler = scheduler;
      else if (spec.process) delete spec.process.scheduler;
    }
    if (linux.seccompPolicy) (spec.linux ??= {}).seccomp = ociSeccomp(linux.seccompPolicy);
    adjustNamespaces(spec, linux.namespaces ?? []);
    adjustSysctl(spec, linux.sysctl ?? {});
    adjustNetDevices(spec, linux.netDevices ?? {});
    // The RDT class first (with the resources), then the settings over it, as NRI's generator does.
    if (linux.resources) applyResources(spec, linux.resources, host.cgroups, host.warn ?? (() => {}));
    adjustRdt(spec, linux.rdt);
    const rdtClass = linux.resources?.rdtClass?.value;
    if ((rdtClass || rdtSetsAnything(linux.rdt)) && spec.linux?.intelRdt && !(await (host.resctrlMounted ?? resctrlMounted)())) {
      const what = [rdtClass ? `class "${rdtClass}"` : '', rdtSetsAnything(linux.rdt) ? describeRdt(linux.rdt!) : ''].filter(Boolean).join(', ');
      throw failedPrecondition(`NRI plugins set RDT settings (${what}), which need the resctrl filesystem (/sys/fs/resctrl), and this host has none mounted`);
    }
  }
  if (adjust.args?.length) processOf(spec).args = [...adjust.args];
  adjustMounts(spec, adjust.mounts ?? []);
  for (const l of adjust.rlimits ?? []) {
    const p = processOf(spec);
    p.rlimits = [...(p.rlimits ?? []).filter((r) => r.type !== l.type), { type: l.type, hard: Number(l.hard), soft: Number(l.soft) }];
  }
}

/**
 * Network devices by host name: set, or removed with `-name`. Then what runc would refuse later, less
 * clearly: devices without a network namespace of the container's own (a host-network pod), more
 * than MAX_NET_DEVICES, two devices of one name in the container (CDI devices' included).
 */
function adjustNetDevices(spec: Spec, devices: Record<string, LinuxNetDevice>): void {
  const entries = Object.entries(devices);
  if (!entries.length) return;
  const linux = (spec.linux ??= {});
  for (const [k, d] of entries) {
    const [host, remove] = removalKey(k);
    if (remove) {
      if (linux.netDevices) delete linux.netDevices[host];
    } else (linux.netDevices ??= {})[host] = d.name ? { name: d.name } : {};
  }
  const all = Object.entries(linux.netDevices ?? {});
  if (!all.length) {
    delete linux.netDevices;
    return;
  }
  if (!(linux.namespaces ?? []).some((n) => n.type === 'network')) {
    throw failedPrecondition(`network devices ${all.map(([h]) => `"${h}"`).join(', ')} need a network namespace of the pod's own; this container uses the host's network`);
  }
  if (all.length > MAX_NET_DEVICES) throw invalidArgument(`${all.length} network devices for one container (at most ${MAX_NET_DEVICES})`);
  const byName = new Map<string, string>();
  for (const [host, d] of all) {
    const name = d.name || host;
    if (name.includes('%')) continue;
    const other = byName.get(name);
    if (other !== undefined) throw invalidArgument(`network devices "${other}" and "${host}" would both be "${name}" in the container`);
    byName.set(name, host);
  }
}

/** RDT settings: `remove` clears the spec's, then each field set replaces the spec's. */
function adjustRdt(spec: Spec, rdt: LinuxRdt | undefined): void {
  if (!rdt) return;
  const linux = (spec.linux ??= {});
  if (rdt.remove) delete linux.intelRdt;
  if (!rdtSetsAnything(rdt)) return;
  const into = (linux.intelRdt ??= {});
  if (rdt.closId !== undefined) into.closID = rdt.closId.value;
  if (rdt.schemata !== undefined) into.schemata = [...rdt.schemata.value];
  if (rdt.enableMonitoring !== undefined) into.enableMonitoring = rdt.enableMonitoring.value;
}

function adjustSysctl(spec: Spec, sysctl: Record<string, string>): void {
  for (const [k, v] of Object.entries(sysctl)) {
    const [key, remove] = removalKey(k);
    if (remove) {
      if (spec.linux?.sysctl) delete spec.linux.sysctl[key];
    } else ((spec.linux ??= {}).sysctl ??= {})[key] = v;
  }
}

const NAMESPACE_TYPES = new Set(['pid', 'network', 'mount', 'ipc', 'uts', 'user', 'cgroup', 'time']);

function adjustNamespaces(spec: Spec, namespaces: NriNamespace[]): void {
  for (const n of namespaces) {
    const [type, remove] = removalKey(n.type);
    if (!NAMESPACE_TYPES.has(type)) throw invalidArgument(`NRI adjustment names an unknown namespace type "${type}"`);
    const linux = (spec.linux ??= {});
    const kept = (linux.namespaces ?? []).filter((x) => x.type !== type);
    linux.namespaces = remove ? kept : [...kept, n.path ? { type: type as 'pid', path: n.path } : { type: type as 'pid' }];
  }
}

function ociSeccomp(s: NriSeccomp): LinuxSeccomp {
  const out: LinuxSeccomp = { defaultAction: s.defaultAction as LinuxSeccomp['defaultAction'] };
  if (s.defaultErrno) out.defaultErrnoRet = s.defaultErrno.value;
  if (s.architectures.length) out.architectures = [...s.architectures] as LinuxSeccomp['architectures'];
  if (s.flags.length) out.flags = [...s.flags] as LinuxSeccomp['flags'];
  if (s.listenerPath) out.listenerPath = s.listenerPath;
  if (s.listenerMetadata) out.listenerMetadata = s.listenerMetadata;
  out.syscalls = s.syscalls.map((sc) => ({
    names: [...sc.names],
    action: sc.action as LinuxSeccomp['defaultAction'],
    ...(sc.errnoRet ? { errnoRet: sc.errnoRet.value } : {}),
    ...(sc.args.length ? { args: sc.args.map((a) => ({ index: a.index, value: Number(a.value), valueTwo: Number(a.valueTwo), op: a.op as 'SCMP_CMP_EQ' })) } : {}),
  }));
  return out;
}

function processOf(spec: Spec): NonNullable<Spec['process']> {
  if (!spec.process) throw invalidArgument('the container spec has no process to adjust');
  return spec.process;
}

function adjustAnnotations(spec: Spec, annotations: Record<string, string>): void {
  for (const [k, v] of Object.entries(annotations)) {
    const [key, remove] = removalKey(k);
    if (remove) {
      if (spec.annotations) delete spec.annotations[key];
    } else (spec.annotations ??= {})[key] = v;
  }
}

function adjustEnv(spec: Spec, env: { key: string; value: string }[]): void {
  if (!env.length) return;
  const p = processOf(spec);
  const changed = new Set(env.map((e) => removalKey(e.key)[0]));
  const kept = (p.env ?? []).filter((e) => !changed.has(e.split('=', 1)[0]));
  const added = env.filter((e) => !removalKey(e.key)[1]).map((e) => `${e.key}=${e.value}`);
  p.env = [...kept, ...added];
}

function ociHook(h: Hook): OciHook {
  const out: OciHook = { path: h.path };
  if (h.args?.length) out.args = [...h.args];
  if (h.env?.length) out.env = [...h.env];
  if (h.timeout) out.timeout = Number(h.timeout.value);
  return out;
}

function adjustHooks(spec: Spec, hooks: ContainerAdjustment['hooks']): void {
  if (!hooks) return;
  for (const kind of ['prestart', 'createRuntime', 'createContainer', 'startContainer', 'poststart', 'poststop'] as const) {
    const more = hooks[kind] ?? [];
    if (!more.length) continue;
    for (const h of more) if (!h.path.startsWith('/')) throw invalidArgument(`${kind} hook path "${h.path}" is not absolute`);
    const all = (spec.hooks ??= {});
    all[kind] = [...(all[kind] ?? []), ...more.map(ociHook)];
  }
}

/** The cgroup access a device gets: read and write, and mknod for block devices (as NRI has it). */
function deviceAccess(d: LinuxDevice): string {
  return d.type === 'b' ? 'rwm' : 'rw';
}

function adjustDevices(spec: Spec, devices: LinuxDevice[]): void {
  for (const d of devices) {
    const [path, remove] = removalKey(d.path);
    const linux = (spec.linux ??= {});
    linux.devices = (linux.devices ?? []).filter((x) => x.path !== path);
    if (remove) continue;
    if (!path.startsWith('/dev/')) throw invalidArgument(`device path "${path}" is not below /dev`);
    if (!['c', 'b', 'u', 'p'].includes(d.type)) throw invalidArgument(`device "${path}" has invalid type "${d.type}"`);
    linux.devices.push({
      path,
      type: d.type,
      major: Number(d.major),
      minor: Number(d.minor),
      ...(d.fileMode ? { fileMode: d.fileMode.value } : {}),
      ...(d.uid ? { uid: d.uid.value } : {}),
      ...(d.gid ? { gid: d.gid.value } : {}),
    });
    const resources = (linux.resources ??= {});
    resources.devices = [...(resources.devices ?? []), { allow: true, type: d.type, major: Number(d.major), minor: Number(d.minor), access: deviceAccess(d) }];
  }
}

/** Mount depth (path components) first, then destination: parents before what is mounted on them. */
function mountOrder(a: OciMount, b: OciMount): number {
  const depth = (m: OciMount) => m.destination.split('/').filter(Boolean).length;
  return depth(a) - depth(b) || (a.destination < b.destination ? -1 : a.destination > b.destination ? 1 : 0);
}

function adjustMounts(spec: Spec, mounts: Mount[]): void {
  if (!mounts.length) return;
  for (const m of mounts) {
    const [dest, remove] = removalKey(m.destination);
    spec.mounts = (spec.mounts ?? []).filter((x) => x.destination !== dest);
    if (remove) continue;
    if (!dest.startsWith('/')) throw invalidArgument(`mount destination "${dest}" is not absolute`);
    const mount: OciMount = { destination: dest, type: m.type || 'bind', source: m.source, options: [...(m.options ?? [])] };
    spec.mounts.push(mount);
    // A shared or slave mount only propagates when the container's root lets it.
    const propagation = [...(m.options ?? [])].reverse().find((option) => option === 'rshared' || option === 'rslave' || option === 'rprivate');
    const linux = (spec.linux ??= {});
    if (propagation === 'rshared') linux.rootfsPropagation = 'rshared';
    else if (propagation === 'rslave' && linux.rootfsPropagation !== 'rshared') linux.rootfsPropagation = 'rslave';
  }
  spec.mounts!.sort(mountOrder);
}

/** An int64 limit as a spec integer, exact (a bigint beyond 2^53; specToJson writes its digits). */
const exact = (v: bigint) => (v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v);

function applyResources(spec: Spec, r: NriResources, host: ResourceHost, warn: (message: string) => void): void {
  const linux = (spec.linux ??= {});
  const res = (linux.resources ??= {});
  if (r.cpu) {
    const cpu = (res.cpu ??= {});
    if (r.cpu.shares) cpu.shares = Number(r.cpu.shares.value);
    if (r.cpu.quota) cpu.quota = exact(r.cpu.quota.value);
    if (r.cpu.period) cpu.period = Number(r.cpu.period.value);
    if (r.cpu.realtimeRuntime) cpu.realtimeRuntime = Number(r.cpu.realtimeRuntime.value);
    if (r.cpu.realtimePeriod) cpu.realtimePeriod = Number(r.cpu.realtimePeriod.value);
    if (r.cpu.cpus) cpu.cpus = r.cpu.cpus;
    if (r.cpu.mems) cpu.mems = r.cpu.mems;
  }
  if (r.memory) {
    const mem = (res.memory ??= {});
    const m = r.memory;
    if (m.limit) {
      mem.limit = exact(m.limit.value);
      // As for a CRI limit: without a swap limit of its own, the container gets no swap beyond it.
      if (!m.swap && host.swapControllerAvailable && mem.limit > 0) mem.swap = mem.limit;
    }
    if (m.swap) {
      if (!host.swapControllerAvailable) throw invalidArgument('a memory swap limit is requested but this host has no swap accounting');
      mem.swap = exact(m.swap.value);
    }
    if (m.reservation) mem.reservation = exact(m.reservation.value);
    if (m.kernel) mem.kernel = Number(m.kernel.value);
    if (m.kernelTcp) mem.kernelTCP = Number(m.kernelTcp.value);
    if (m.swappiness) mem.swappiness = Number(m.swappiness.value);
    if (m.disableOomKiller) mem.disableOOMKiller = m.disableOomKiller.value;
    if (m.useHierarchy) mem.useHierarchy = m.useHierarchy.value;
  }
  if (r.hugepageLimits?.length) {
    if (!host.hugetlbControllerAvailable) throw invalidArgument('huge pages limits are requested but the hugetlb cgroup controller is missing on this host');
    const bySize = new Map((res.hugepageLimits ?? []).map((h) => [h.pageSize, h]));
    for (const h of r.hugepageLimits) bySize.set(h.pageSize, { pageSize: h.pageSize, limit: exact(h.limit) });
    res.hugepageLimits = [...bySize.values()];
  }
  const unified = Object.entries(r.unified ?? {});
  if (unified.length) {
    if (!host.cgroupV2) throw invalidArgument('unified cgroup resources need cgroup v2; this host uses cgroup v1');
    res.unified = { ...(res.unified ?? {}), ...Object.fromEntries(unified) };
  }
  if (r.pids) res.pids = { limit: Number(r.pids.limit) };
  // An RDT class is the resctrl group the container joins (closID), as containerd 2.4 and CRI-O 1.36
  // resolve it; an empty class clears the spec's RDT settings.
  if (r.rdtClass) {
    if (r.rdtClass.value) linux.intelRdt = { closID: r.rdtClass.value };
    else delete linux.intelRdt;
  }
  // Stove has no block I/O class configuration: like containerd without one, a class is accepted and
  // left out of the spec (an empty class clears the setting).
  if (r.blockioClass) {
    delete res.blockIO;
    if (r.blockioClass.value) warn(`block I/O class "${r.blockioClass.value}" ignored: no block I/O classes are configured`);
  }
}
