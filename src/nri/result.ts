/**
 * Merging the answers of several plugins to one event, with NRI's ownership rules: within one event,
 * each setting of a container (an annotation key, a mount destination, a device path, an env name, the
 * memory limit, a hugepage size, …) may be set by one plugin only; a second plugin setting it is an
 * error naming both. A key marked for removal (a leading '-') drops an earlier plugin's setting and
 * its claim. Plugins are asked in index order and see the adjustments of the ones before them.
 */
import {
  ContainerAdjustment,
  ContainerUpdate,
  Field,
  LinuxContainer,
  LinuxResources,
  type FieldOwners,
  type OwningPlugins,
  type Container,
  type CreateContainerResponse,
  type Hooks,
  type KeyValue,
  type LinuxCPU,
  type LinuxDevice,
  type LinuxIOPriority,
  type LinuxMemory,
  type LinuxNetDevice,
  type LinuxRdt,
  type LinuxScheduler,
  type Mount,
  type POSIXRlimit,
  type UpdateContainerRequest,
} from '../gen/nri/api.js';
import { lacksField, type RuntimeField, type RuntimeSupport } from '../cdi/index.js';
import {
  MAX_NET_DEVICES,
  describeIoPriority,
  describeRdt,
  describeScheduler,
  ioPriorityProblem,
  netDeviceProblem,
  rdtProblem,
  rdtSetsAnything,
  schedulerProblem,
} from './linux-fields.js';

/**
 * A plugin's answer cannot be merged: two plugins set the same thing, or one asked for something
 * invalid (InvalidArgument), or for what the container's OCI runtime does not do (FailedPrecondition).
 */
export class PluginConflictError extends Error {
  constructor(
    message: string,
    readonly code: 'InvalidArgument' | 'FailedPrecondition' = 'InvalidArgument',
  ) {
    super(message);
  }
}

const MEMORY_FIELDS: [keyof LinuxMemory, string][] = [
  ['limit', 'memory limit'],
  ['reservation', 'memory reservation'],
  ['swap', 'memory swap limit'],
  ['kernel', 'memory kernel limit'],
  ['kernelTcp', 'memory TCP limit'],
  ['swappiness', 'memory swappiness'],
  ['disableOomKiller', 'memory disable OOM killer'],
  ['useHierarchy', "memory 'UseHierarchy'"],
];
const CPU_OPTIONAL_FIELDS: [keyof LinuxCPU, string][] = [
  ['shares', 'CPU shares'],
  ['quota', 'CPU quota'],
  ['period', 'CPU period'],
  ['realtimeRuntime', 'CPU realtime runtime'],
  ['realtimePeriod', 'CPU realtime period'],
];
const CPU_STRING_FIELDS: [keyof LinuxCPU, string][] = [
  ['cpus', 'CPU pinning'],
  ['mems', 'memory pinning'],
];

/** Which plugin set what, per container. */
class Owners {
  private readonly owners = new Map<string, Map<string, string>>();

  claim(containerId: string, what: string, plugin: string): void {
    let mine = this.owners.get(containerId);
    if (!mine) this.owners.set(containerId, (mine = new Map<string, string>()));
    const other = mine.get(what);
    if (other !== undefined) throw new PluginConflictError(`plugins "${plugin}" and "${other}" both tried to set ${what}`);
    mine.set(what, plugin);
  }

  clear(containerId: string, what: string): void {
    this.owners.get(containerId)?.delete(what);
  }

  /** Every claim, per container: what → plugin. */
  all(): Map<string, Map<string, string>> {
    return this.owners;
  }
}

const SIMPLE_FIELDS: Record<string, Field> = {
  'memory limit': Field.MemLimit,
  'memory reservation': Field.MemReservation,
  'memory swap limit': Field.MemSwapLimit,
  'memory kernel limit': Field.MemKernelLimit,
  'memory TCP limit': Field.MemTCPLimit,
  'memory swappiness': Field.MemSwappiness,
  'memory disable OOM killer': Field.MemDisableOomKiller,
  "memory 'UseHierarchy'": Field.MemUseHierarchy,
  'CPU shares': Field.CPUShares,
  'CPU quota': Field.CPUQuota,
  'CPU period': Field.CPUPeriod,
  'CPU realtime runtime': Field.CPURealtimeRuntime,
  'CPU realtime period': Field.CPURealtimePeriod,
  'CPU pinning': Field.CPUSetCPUs,
  'memory pinning': Field.CPUSetMems,
  'pids pinning': Field.PidsLimit,
  'block I/O class': Field.BlockioClass,
  'RDT class': Field.RdtClass,
  'cgroups path': Field.CgroupsPath,
  'oom score adj': Field.OomScoreAdj,
  'seccomp policy': Field.SeccompPolicy,
  'I/O priority': Field.IoPriority,
  'scheduling policy': Field.LinuxSched,
  'RDT CLOS ID': Field.RdtClosID,
  'RDT schemata': Field.RdtSchemata,
  'RDT monitoring': Field.RdtEnableMonitoring,
  args: Field.Args,
  'OCI hooks': Field.OciHooks,
};
const COMPOUND_FIELDS: [string, Field][] = [
  ['annotation ', Field.Annotations],
  ['mount ', Field.Mounts],
  ['device ', Field.Devices],
  ['CDI device ', Field.CdiDevices],
  ['env ', Field.Env],
  ['hugepage limit of size ', Field.HugepageLimits],
  ['unified resource ', Field.CgroupsUnified],
  ['rlimit ', Field.Rlimits],
  ['sysctl ', Field.Sysctl],
  ['network device ', Field.LinuxNetDevices],
];

/** Stove's claims as NRI's OwningPlugins (ValidateContainerAdjustment's `owners`). */
function owningPlugins(owners: Owners): OwningPlugins {
  const out: OwningPlugins = { owners: {} };
  for (const [id, claims] of owners.all()) {
    const f: FieldOwners = { simple: {}, compound: {} };
    const compound = (field: Field, key: string, plugin: string) => ((f.compound[field] ??= { owners: {} }).owners[key] = plugin);
    for (const [what, plugin] of claims) {
      const simple = SIMPLE_FIELDS[what];
      if (simple !== undefined) {
        f.simple[simple] = plugin;
        continue;
      }
      if (what.endsWith(' namespace')) {
        compound(Field.Namespace, what.slice(0, -' namespace'.length), plugin);
        continue;
      }
      const c = COMPOUND_FIELDS.find(([prefix]) => what.startsWith(prefix));
      if (c) compound(c[1], what.slice(c[0].length), plugin);
    }
    out.owners[id] = f;
  }
  return out;
}

/** `-key` → [key, true]; `key` → [key, false]. */
export function removalKey(key: string): [string, boolean] {
  return key.startsWith('-') ? [key.slice(1), true] : [key, false];
}

function emptyResources(): LinuxResources {
  return LinuxResources.fromPartial({ memory: {}, cpu: {}, hugepageLimits: [], unified: {} });
}

/**
 * Lays `from` over `into` (both NRI resources), claiming each field set for `plugin`. Used for a new
 * container's adjustment and for updates alike.
 */
function mergeResources(owners: Owners, id: string, plugin: string, into: LinuxResources, from: LinuxResources): void {
  into.memory ??= {} as LinuxMemory;
  into.cpu ??= {} as LinuxCPU;
  const mem = into.memory as unknown as Record<string, unknown>;
  for (const [field, what] of MEMORY_FIELDS) {
    const v = from.memory?.[field];
    if (v === undefined) continue;
    owners.claim(id, what, plugin);
    mem[field] = v;
  }
  const cpu = into.cpu as unknown as Record<string, unknown>;
  for (const [field, what] of CPU_OPTIONAL_FIELDS) {
    const v = from.cpu?.[field];
    if (v === undefined) continue;
    owners.claim(id, what, plugin);
    cpu[field] = v;
  }
  for (const [field, what] of CPU_STRING_FIELDS) {
    const v = from.cpu?.[field];
    if (!v) continue;
    owners.claim(id, what, plugin);
    cpu[field] = v;
  }
  for (const l of from.hugepageLimits ?? []) {
    owners.claim(id, `hugepage limit of size ${l.pageSize}`, plugin);
    into.hugepageLimits = [...(into.hugepageLimits ?? []).filter((h) => h.pageSize !== l.pageSize), l];
  }
  for (const [k, v] of Object.entries(from.unified ?? {})) {
    owners.claim(id, `unified resource ${k}`, plugin);
    into.unified = { ...(into.unified ?? {}), [k]: v };
  }
  if (from.blockioClass) {
    owners.claim(id, 'block I/O class', plugin);
    into.blockioClass = from.blockioClass;
  }
  if (from.rdtClass) {
    owners.claim(id, 'RDT class', plugin);
    into.rdtClass = from.rdtClass;
  }
  if (from.pids) {
    owners.claim(id, 'pids pinning', plugin);
    into.pids = { limit: from.pids.limit };
  }
}

/** The merged updates of other containers that one event's plugins asked for. */
class UpdateSet {
  readonly list: ContainerUpdate[] = [];
  private readonly byId = new Map<string, ContainerUpdate>();

  constructor(
    private readonly owners: Owners,
    /** The container being created: plugins adjust it, they cannot update it. */
    private readonly creating?: string,
    /** The container being updated: its updates merge into the request instead. */
    private readonly updating?: { id: string; resources: LinuxResources },
  ) {}

  add(updates: ContainerUpdate[], plugin: string): void {
    for (const u of updates) {
      if (u.containerId === this.creating) {
        throw new PluginConflictError(`plugin "${plugin}" asked update of "${u.containerId}" during creation`);
      }
      const resources = u.linux?.resources;
      if (this.updating && u.containerId === this.updating.id) {
        if (resources) this.mergeInto(this.updating.resources, u, resources, plugin);
        continue;
      }
      let merged = this.byId.get(u.containerId);
      if (merged) merged.ignoreFailure = merged.ignoreFailure && u.ignoreFailure;
      else {
        merged = ContainerUpdate.fromPartial({ containerId: u.containerId, linux: { resources: emptyResources() }, ignoreFailure: u.ignoreFailure });
        this.byId.set(u.containerId, merged);
        this.list.push(merged);
      }
      if (resources) this.mergeInto(merged.linux!.resources!, u, resources, plugin);
    }
  }

  private mergeInto(into: LinuxResources, u: ContainerUpdate, from: LinuxResources, plugin: string): void {
    try {
      mergeResources(this.owners, u.containerId, plugin, into, from);
    } catch (err) {
      if (!u.ignoreFailure) throw err;
    }
  }
}

/**
 * The adjustment of NRI v0.12 that Stove does not carry out: refused, naming the plugin, rather than
 * dropped (a plugin would believe the container has it).
 */
function refuseUnsupported(a: ContainerAdjustment, plugin: string): void {
  if (a.linux?.memoryPolicy) {
    throw new PluginConflictError(`plugin "${plugin}" asked for a NUMA memory policy (linux.memory_policy), which Stove does not apply to containers`);
  }
}

/** The RDT settings' claims, each with the runtime field it needs. */
const RDT_PARTS: [keyof Omit<LinuxRdt, 'remove'>, string][] = [
  ['closId', 'RDT CLOS ID'],
  ['schemata', 'RDT schemata'],
  ['enableMonitoring', 'RDT monitoring'],
];

/** The merged outcome of CreateContainer across plugins. */
export class CreateResult {
  readonly adjust: ContainerAdjustment;
  private readonly owners = new Owners();
  private readonly updates: UpdateSet;
  /** Hooks are appended, never in conflict: every plugin adding some (NRI lists them comma-separated). */
  private readonly hookOwners: string[] = [];

  /**
   * `container` is the request's container: it is changed as plugins adjust it, for the next plugin.
   * `runtime`: what the container's OCI runtime implements (undefined: not known, and nothing that
   * needs a runtime newer than runtime-spec 1.0.2 is accepted).
   */
  constructor(
    readonly container: Container,
    private readonly runtime?: RuntimeSupport,
  ) {
    this.adjust = ContainerAdjustment.fromPartial({
      hooks: {},
      linux: { devices: [], resources: emptyResources(), namespaces: [], sysctl: {} },
    });
    this.updates = new UpdateSet(this.owners, container.id);
    container.annotations ??= {};
    container.hooks ??= { prestart: [], createRuntime: [], createContainer: [], startContainer: [], poststart: [], poststop: [] };
    container.linux ??= LinuxContainer.fromPartial({ resources: emptyResources() });
    container.linux.resources ??= emptyResources();
  }

  get containerUpdates(): ContainerUpdate[] {
    return this.updates.list;
  }

  /** Which plugin set what, as NRI's validators get it. */
  get owningPlugins(): OwningPlugins {
    const out = owningPlugins(this.owners);
    if (this.hookOwners.length) ((out.owners[this.container.id] ??= { simple: {}, compound: {} }).simple[Field.OciHooks] = this.hookOwners.join(','));
    return out;
  }

  /** Folds in one plugin's answer; throws PluginConflictError on a conflict. */
  apply(rpl: CreateContainerResponse | undefined, plugin: string): void {
    if (!rpl) return;
    const a = rpl.adjust;
    if (a) {
      this.annotations(a.annotations ?? {}, plugin);
      this.mounts(a.mounts ?? [], plugin);
      this.env(a.env ?? [], plugin);
      this.hooks(a.hooks);
      if (a.hooks && Object.values(a.hooks).some((list: unknown[]) => list.length > 0)) this.hookOwners.push(plugin);
      if (a.linux) {
        this.devices(a.linux.devices ?? [], plugin);
        if (a.linux.resources) {
          this.rdtClass(a.linux.resources.rdtClass?.value, plugin);
          mergeResources(this.owners, this.container.id, plugin, this.adjust.linux!.resources!, a.linux.resources);
          mergeResources(new Owners(), this.container.id, plugin, this.container.linux!.resources!, a.linux.resources);
        }
        if (a.linux.cgroupsPath) {
          this.owners.claim(this.container.id, 'cgroups path', plugin);
          this.adjust.linux!.cgroupsPath = this.container.linux!.cgroupsPath = a.linux.cgroupsPath;
        }
        if (a.linux.oomScoreAdj) {
          this.owners.claim(this.container.id, 'oom score adj', plugin);
          this.adjust.linux!.oomScoreAdj = this.container.linux!.oomScoreAdj = a.linux.oomScoreAdj;
        }
        this.ioPriority(a.linux.ioPriority, plugin);
        if (a.linux.seccompPolicy) {
          this.owners.claim(this.container.id, 'seccomp policy', plugin);
          this.adjust.linux!.seccompPolicy = this.container.linux!.seccompPolicy = a.linux.seccompPolicy;
        }
        this.namespaces(a.linux.namespaces ?? [], plugin);
        this.sysctl(a.linux.sysctl ?? {}, plugin);
        this.netDevices(a.linux.netDevices ?? {}, plugin);
        this.scheduler(a.linux.scheduler, plugin);
        this.rdt(a.linux.rdt, plugin);
        refuseUnsupported(a, plugin);
      }
      this.args(a.args ?? [], plugin);
      this.rlimits(a.rlimits ?? [], plugin);
      for (const d of a.CDIDevices ?? []) {
        this.owners.claim(this.container.id, `CDI device ${d.name}`, plugin);
        this.adjust.CDIDevices.push(d);
      }
    }
    this.updates.add(rpl.update ?? [], plugin);
  }

  /** Refuses what the container's runtime does not implement, naming the plugin, the field and the runtime. */
  private needs(field: RuntimeField, plugin: string, what: string): void {
    const lack = lacksField(field, this.runtime);
    if (lack) throw new PluginConflictError(`plugin "${plugin}" asked for ${what}, which ${lack}`, 'FailedPrecondition');
  }

  /** An RDT class becomes the container's resctrl group (closID), as on containerd 2.4 and CRI-O 1.36. */
  private rdtClass(cls: string | undefined, plugin: string): void {
    if (!cls) return;
    const problem = rdtProblem({ closId: { value: cls }, schemata: undefined, enableMonitoring: undefined, remove: false });
    if (problem) throw new PluginConflictError(`plugin "${plugin}" asked for an invalid RDT class (linux.resources.rdt_class): ${problem.replace('closID', 'class')}`);
    this.needs('intelRdt', plugin, `RDT class "${cls}" (linux.intelRdt.closID)`);
  }

  private ioPriority(p: LinuxIOPriority | undefined, plugin: string): void {
    if (!p) return;
    const problem = ioPriorityProblem(p);
    if (problem) throw new PluginConflictError(`plugin "${plugin}" asked for an invalid I/O priority (linux.io_priority): ${problem}`);
    this.needs('ioPriority', plugin, `an I/O priority (${describeIoPriority(p)}, process.ioPriority)`);
    this.owners.claim(this.container.id, 'I/O priority', plugin);
    this.adjust.linux!.ioPriority = this.container.linux!.ioPriority = { ...p };
  }

  /** A scheduling policy; SCHED_NONE removes the spec's (NRI's ToOCI makes it no policy). */
  private scheduler(s: LinuxScheduler | undefined, plugin: string): void {
    if (!s) return;
    const problem = schedulerProblem(s);
    if (problem) throw new PluginConflictError(`plugin "${plugin}" asked for an invalid scheduling policy (linux.scheduler): ${problem}`);
    if (s.policy !== 0) this.needs('scheduler', plugin, `a scheduling policy (${describeScheduler(s)}, process.scheduler)`);
    this.owners.claim(this.container.id, 'scheduling policy', plugin);
    this.adjust.linux!.scheduler = { ...s, flags: [...s.flags] };
    this.container.linux!.scheduler = s.policy !== 0 ? { ...s, flags: [...s.flags] } : undefined;
  }

  /**
   * Network devices by host interface name: set, or removed with `-name`. Two devices may not end up
   * with one name in the container (unless a `%d` template), nor more than MAX_NET_DEVICES.
   */
  private netDevices(devices: Record<string, LinuxNetDevice>, plugin: string): void {
    const entries = Object.entries(devices);
    if (!entries.length) return;
    if (entries.length > MAX_NET_DEVICES) throw new PluginConflictError(`plugin "${plugin}" asked for ${entries.length} network devices (at most ${MAX_NET_DEVICES})`);
    const id = this.container.id;
    const mine = this.container.linux!;
    const adjust = this.adjust.linux!;
    const removed = new Set<string>();
    for (const [k] of entries) {
      const [host, marked] = removalKey(k);
      if (marked) removed.add(host);
    }
    for (const [k, d] of entries) {
      const [host, marked] = removalKey(k);
      if (marked) continue;
      const problem = netDeviceProblem(host, d);
      if (problem) throw new PluginConflictError(`plugin "${plugin}" asked for an invalid network device (linux.net_devices "${host.slice(0, 64)}"): ${problem}`);
      this.needs('netDevices', plugin, `network device "${host}"${d?.name ? ` as "${d.name}"` : ''} (linux.netDevices)`);
    }
    for (const host of removed) {
      this.owners.clear(id, `network device ${host}`);
      delete mine.netDevices[host];
      delete adjust.netDevices[host];
      adjust.netDevices[`-${host}`] = { name: '' };
    }
    for (const [k, d] of entries) {
      const [host, marked] = removalKey(k);
      if (marked) continue;
      this.owners.claim(id, `network device ${host}`, plugin);
      delete adjust.netDevices[`-${host}`];
      adjust.netDevices[host] = mine.netDevices[host] = { name: d?.name ?? '' };
    }
    const all = Object.entries(mine.netDevices);
    if (all.length > MAX_NET_DEVICES) throw new PluginConflictError(`plugin "${plugin}" takes the container to ${all.length} network devices (at most ${MAX_NET_DEVICES})`);
    const byName = new Map<string, string>();
    for (const [host, d] of all) {
      const name = d.name || host;
      if (name.includes('%')) continue;
      const other = byName.get(name);
      if (other !== undefined) {
        const owner = (h: string) => this.owners.all().get(id)?.get(`network device ${h}`);
        const who = [owner(other), owner(host)].filter((o) => o !== undefined).map((o) => `"${o}"`);
        throw new PluginConflictError(`network devices "${other}" and "${host}" would both be "${name}" in the container (set by plugin(s) ${[...new Set(who)].join(' and ') || 'none'})`);
      }
      byName.set(name, host);
    }
  }

  /**
   * RDT settings: closID, schemata and monitoring each belong to one plugin; `remove` drops the
   * container's RDT settings (and the claims), and a field set after it (by the same or a later
   * plugin) keeps its value, as NRI merges them.
   */
  private rdt(rdt: LinuxRdt | undefined, plugin: string): void {
    if (!rdt) return;
    const problem = rdtProblem(rdt);
    if (problem) throw new PluginConflictError(`plugin "${plugin}" asked for invalid RDT settings (linux.rdt): ${problem}`);
    if (rdtSetsAnything(rdt)) {
      const what = `RDT settings (${describeRdt(rdt)}, linux.intelRdt)`;
      this.needs('intelRdt', plugin, what);
      if (rdt.schemata !== undefined) this.needs('intelRdtSchemata', plugin, what);
      if (rdt.enableMonitoring?.value) this.needs('intelRdtMonitoring', plugin, what);
    }
    const id = this.container.id;
    const linux = this.adjust.linux!;
    if (rdt.remove) {
      for (const [, what] of RDT_PARTS) this.owners.clear(id, what);
      linux.rdt = { closId: undefined, schemata: undefined, enableMonitoring: undefined, remove: true };
      this.container.linux!.rdt = undefined;
    }
    if (!rdtSetsAnything(rdt)) return;
    const into = (linux.rdt ??= { closId: undefined, schemata: undefined, enableMonitoring: undefined, remove: false });
    const seen = (this.container.linux!.rdt ??= { closId: undefined, schemata: undefined, enableMonitoring: undefined, remove: false });
    for (const [field, what] of RDT_PARTS) {
      const v = rdt[field];
      if (v === undefined) continue;
      this.owners.claim(id, what, plugin);
      (into as unknown as Record<string, unknown>)[field] = (seen as unknown as Record<string, unknown>)[field] = structuredClone(v);
      into.remove = false;
    }
  }

  /** Args replace the process's; a first '' (NRI's UpdateArgs) takes them over from an earlier plugin. */
  private args(args: string[], plugin: string): void {
    if (!args.length) return;
    const id = this.container.id;
    let list = args;
    if (list[0] === '') {
      list = list.slice(1);
      this.owners.clear(id, 'args');
    }
    if (!list.length) return;
    this.owners.claim(id, 'args', plugin);
    this.adjust.args = [...list];
    this.container.args = [...list];
  }

  private sysctl(sysctl: Record<string, string>, plugin: string): void {
    const id = this.container.id;
    const linux = this.adjust.linux!;
    for (const [k, v] of Object.entries(sysctl)) {
      const [key, remove] = removalKey(k);
      if (remove) {
        this.owners.clear(id, `sysctl ${key}`);
        delete linux.sysctl[key];
        delete this.container.linux!.sysctl[key];
        linux.sysctl[`-${key}`] = '';
        continue;
      }
      this.owners.claim(id, `sysctl ${key}`, plugin);
      delete linux.sysctl[`-${key}`];
      linux.sysctl[key] = v;
      this.container.linux!.sysctl[key] = v;
    }
  }

  /** Namespaces are set (path replaced) or removed (a type '-net') by type. */
  private namespaces(namespaces: { type: string; path: string }[], plugin: string): void {
    const id = this.container.id;
    const linux = this.adjust.linux!;
    for (const n of namespaces) {
      const [type, remove] = removalKey(n.type);
      if (!remove) this.owners.claim(id, `${type} namespace`, plugin);
      else this.owners.clear(id, `${type} namespace`);
      linux.namespaces = [...linux.namespaces.filter((x) => removalKey(x.type)[0] !== type), { type: n.type, path: remove ? '' : n.path }];
      const mine = this.container.linux!;
      mine.namespaces = remove ? mine.namespaces.filter((x) => x.type !== type) : [...mine.namespaces.filter((x) => x.type !== type), { type, path: n.path }];
    }
  }

  private annotations(annotations: Record<string, string>, plugin: string): void {
    const id = this.container.id;
    const removed = new Set<string>();
    for (const k of Object.keys(annotations)) {
      const [key, marked] = removalKey(k);
      if (marked) removed.add(key);
    }
    for (const [k, v] of Object.entries(annotations)) {
      if (removalKey(k)[1]) continue;
      if (removed.has(k)) {
        this.owners.clear(id, `annotation ${k}`);
        delete this.container.annotations[k];
        removed.delete(k);
      }
      this.owners.claim(id, `annotation ${k}`, plugin);
      this.container.annotations[k] = v;
      this.adjust.annotations[k] = v;
    }
    for (const k of removed) {
      this.owners.clear(id, `annotation ${k}`);
      delete this.container.annotations[k];
      delete this.adjust.annotations[k];
      this.adjust.annotations[`-${k}`] = '';
    }
  }

  private mounts(mounts: Mount[], plugin: string): void {
    const id = this.container.id;
    const removed = new Set<string>();
    const added: Mount[] = [];
    for (const m of mounts) {
      const [dest, marked] = removalKey(m.destination);
      if (marked) removed.add(dest);
      else added.push(m);
    }
    const touched = new Set([...removed, ...added.map((m) => m.destination)]);
    this.adjust.mounts = this.adjust.mounts.filter((m) => {
      if (!removed.has(m.destination)) return true;
      this.owners.clear(id, `mount ${m.destination}`);
      return false;
    });
    this.container.mounts = this.container.mounts.filter((m) => !touched.has(m.destination));
    for (const m of added) {
      this.owners.claim(id, `mount ${m.destination}`, plugin);
      this.adjust.mounts.push(m);
    }
    const addedDests = new Set(added.map((m) => m.destination));
    for (const dest of removed) if (!addedDests.has(dest)) this.adjust.mounts.push({ destination: `-${dest}`, type: '', source: '', options: [] });
    this.container.mounts.push(...added);
  }

  private devices(devices: LinuxDevice[], plugin: string): void {
    const id = this.container.id;
    const linux = this.container.linux!;
    const removed = new Set<string>();
    const added: LinuxDevice[] = [];
    for (const d of devices) {
      const [path, marked] = removalKey(d.path);
      if (marked) removed.add(path);
      else added.push(d);
    }
    const touched = new Set([...removed, ...added.map((d) => d.path)]);
    this.adjust.linux!.devices = this.adjust.linux!.devices.filter((d) => {
      if (!removed.has(d.path)) return true;
      this.owners.clear(id, `device ${d.path}`);
      return false;
    });
    linux.devices = linux.devices.filter((d) => !touched.has(d.path));
    for (const d of added) {
      this.owners.claim(id, `device ${d.path}`, plugin);
      this.adjust.linux!.devices.push(d);
    }
    // A removal stays in the adjustment so the device also leaves the spec.
    const addedPaths = new Set(added.map((d) => d.path));
    for (const path of removed) {
      if (!addedPaths.has(path)) this.adjust.linux!.devices.push({ path: `-${path}`, type: '', major: 0n, minor: 0n, fileMode: undefined, uid: undefined, gid: undefined });
    }
    linux.devices.push(...added);
  }

  private env(env: KeyValue[], plugin: string): void {
    const id = this.container.id;
    const removed = new Set<string>();
    const added: KeyValue[] = [];
    for (const e of env) {
      const [key, marked] = removalKey(e.key);
      if (marked) removed.add(key);
      else added.push(e);
    }
    const touched = new Set([...removed, ...added.map((e) => e.key)]);
    this.adjust.env = this.adjust.env.filter((e) => {
      if (!removed.has(e.key)) return true;
      this.owners.clear(id, `env ${e.key}`);
      return false;
    });
    this.container.env = this.container.env.filter((e) => !touched.has(e.split('=', 1)[0]));
    for (const e of added) {
      this.owners.claim(id, `env ${e.key}`, plugin);
      this.adjust.env.push(e);
      this.container.env.push(`${e.key}=${e.value}`);
    }
    const addedKeys = new Set(added.map((e) => e.key));
    for (const key of removed) if (!addedKeys.has(key)) this.adjust.env.push({ key: `-${key}`, value: '' });
  }

  /** Hooks only add up: no plugin owns them. */
  private hooks(hooks: Hooks | undefined): void {
    if (!hooks) return;
    const into = this.adjust.hooks!;
    const seen = this.container.hooks!;
    for (const kind of ['prestart', 'createRuntime', 'createContainer', 'startContainer', 'poststart', 'poststop'] as const) {
      const more = hooks[kind] ?? [];
      if (!more.length) continue;
      into[kind] = [...(into[kind] ?? []), ...more];
      seen[kind] = [...(seen[kind] ?? []), ...more];
    }
  }

  private rlimits(rlimits: POSIXRlimit[], plugin: string): void {
    for (const l of rlimits) {
      this.owners.claim(this.container.id, `rlimit ${l.type}`, plugin);
      this.adjust.rlimits.push(l);
      this.container.rlimits.push(l);
    }
  }
}

/** The merged outcome of UpdateContainer or StopContainer across plugins. */
export class UpdateResult {
  private readonly owners = new Owners();
  private readonly updates: UpdateSet;

  /** `request` (UpdateContainer only) gets the plugins' changes to the container being updated. */
  constructor(readonly request?: UpdateContainerRequest) {
    if (request) request.linuxResources ??= emptyResources();
    this.updates = new UpdateSet(
      this.owners,
      undefined,
      request ? { id: request.container!.id, resources: request.linuxResources! } : undefined,
    );
  }

  /** Updates of other containers. */
  get containerUpdates(): ContainerUpdate[] {
    return this.updates.list;
  }

  apply(updates: ContainerUpdate[] | undefined, plugin: string): void {
    this.updates.add(updates ?? [], plugin);
  }
}
