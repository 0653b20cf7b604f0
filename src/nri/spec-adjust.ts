/**
 * Applies the merged ContainerAdjustment of NRI plugins to a container's OCI spec, the way containerd's
 * NRI spec generator does: annotations and env set or removed by key, hooks appended, devices replaced
 * by path (with a device cgroup rule allowing them), mounts replaced by destination and sorted by depth,
 * resources laid over field by field, cgroups path, OOM score adjustment and rlimits (replaced by type).
 */
import type { ContainerAdjustment, Hook, LinuxDevice, LinuxResources as NriResources, Mount } from '../gen/nri/api.js';
import { invalidArgument } from '../common/errors.js';
import type { OciHook, OciMount, ResourceHost, Spec } from '../oci/index.js';
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
}

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
    if (linux.resources) applyResources(spec, linux.resources, host.cgroups, host.warn ?? (() => {}));
  }
  adjustMounts(spec, adjust.mounts ?? []);
  for (const l of adjust.rlimits ?? []) {
    const p = processOf(spec);
    p.rlimits = [...(p.rlimits ?? []).filter((r) => r.type !== l.type), { type: l.type, hard: Number(l.hard), soft: Number(l.soft) }];
  }
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

function applyResources(spec: Spec, r: NriResources, host: ResourceHost, warn: (message: string) => void): void {
  const linux = (spec.linux ??= {});
  const res = (linux.resources ??= {});
  if (r.cpu) {
    const cpu = (res.cpu ??= {});
    if (r.cpu.shares) cpu.shares = Number(r.cpu.shares.value);
    if (r.cpu.quota) cpu.quota = Number(r.cpu.quota.value);
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
      mem.limit = Number(m.limit.value);
      // As for a CRI limit: without a swap limit of its own, the container gets no swap beyond it.
      if (!m.swap && host.swapControllerAvailable && mem.limit > 0) mem.swap = mem.limit;
    }
    if (m.swap) {
      if (!host.swapControllerAvailable) throw invalidArgument('a memory swap limit is requested but this host has no swap accounting');
      mem.swap = Number(m.swap.value);
    }
    if (m.reservation) mem.reservation = Number(m.reservation.value);
    if (m.kernel) mem.kernel = Number(m.kernel.value);
    if (m.kernelTcp) mem.kernelTCP = Number(m.kernelTcp.value);
    if (m.swappiness) mem.swappiness = Number(m.swappiness.value);
    if (m.disableOomKiller) mem.disableOOMKiller = m.disableOomKiller.value;
    if (m.useHierarchy) mem.useHierarchy = m.useHierarchy.value;
  }
  if (r.hugepageLimits?.length) {
    if (!host.hugetlbControllerAvailable) throw invalidArgument('huge pages limits are requested but the hugetlb cgroup controller is missing on this host');
    const bySize = new Map((res.hugepageLimits ?? []).map((h) => [h.pageSize, h]));
    for (const h of r.hugepageLimits) bySize.set(h.pageSize, { pageSize: h.pageSize, limit: Number(h.limit) });
    res.hugepageLimits = [...bySize.values()];
  }
  const unified = Object.entries(r.unified ?? {});
  if (unified.length) {
    if (!host.cgroupV2) throw invalidArgument('unified cgroup resources need cgroup v2; this host uses cgroup v1');
    res.unified = { ...(res.unified ?? {}), ...Object.fromEntries(unified) };
  }
  if (r.pids) res.pids = { limit: Number(r.pids.limit) };
  // Stove has no block I/O or RDT class configuration: like containerd without one, a class is accepted
  // and left out of the spec (an empty class clears the setting).
  if (r.rdtClass) {
    delete linux.intelRdt;
    if (r.rdtClass.value) warn(`RDT class "${r.rdtClass.value}" ignored: no RDT classes are configured`);
  }
  if (r.blockioClass) {
    delete res.blockIO;
    if (r.blockioClass.value) warn(`block I/O class "${r.blockioClass.value}" ignored: no block I/O classes are configured`);
  }
}
