/**
 * Resource limits and the cgroup path (containerd `WithResources`, `getCgroupsPath`, `WithOOMScoreAdj`).
 * Zero in a CRI field means "not set".
 */
import type { LinuxContainerResources } from '../gen/runtime/v1/api.js';
import { invalidArgument } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import type { LinuxResources, SpecInt } from './types.js';
import { resourcesOf, type SpecOpt } from './opts.js';

export type CgroupDriverName = 'cgroupfs' | 'systemd';

/** What the host's cgroups can enforce. */
export interface ResourceHost {
  cgroupV2: boolean;
  /** v1 `memory.memsw.*` exists (or v2 `memory.swap.max`): swap limits can be set. */
  swapControllerAvailable: boolean;
  /** The hugetlb controller is mounted. */
  hugetlbControllerAvailable: boolean;
  /** Told each time zero hugepage limits are dropped for want of the hugetlb controller (to log it once). */
  hugepageLimitsSkipped?: (pageSizes: string[]) => void;
}

export const INT64_MAX = (1n << 63n) - 1n;
const INT64_MIN = -(1n << 63n);
export const UINT64_MAX = (1n << 64n) - 1n;

/**
 * A CRI int64 (or uint64, up to `max`) as a spec integer: a number while a double holds it exactly, else
 * the bigint itself, which specToJson writes digit for digit. The kubelet sends "no limit" as such values
 * (cgroup v1's 9223372036854771712 bytes: PAGE_COUNTER_MAX pages), and runc must read them unchanged.
 */
export function toSpecNumber(value: bigint, field: string, max: bigint = INT64_MAX): SpecInt {
  if (value > max || value < INT64_MIN) throw invalidArgument(`${field} ${value} is out of range`);
  return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value;
}

/**
 * `linux.resources` for CRI resources (also what UpdateContainerResources hands to `runc update`).
 * Memory limit without a swap limit sets swap = limit (no swapping), as containerd does; hugepage
 * limits need the hugetlb controller (see hugepageLimits); `unified` needs cgroup v2.
 */
export function linuxResources(r: LinuxContainerResources | undefined, host: ResourceHost): LinuxResources {
  const out: LinuxResources = {};
  if (!r) return out;
  const cpu: NonNullable<LinuxResources['cpu']> = {};
  if (r.cpuPeriod > 0n) cpu.period = Number(toSpecNumber(r.cpuPeriod, 'cpu_period'));
  if (r.cpuQuota !== 0n) cpu.quota = toSpecNumber(r.cpuQuota, 'cpu_quota');
  if (r.cpuShares > 0n) cpu.shares = Number(toSpecNumber(r.cpuShares, 'cpu_shares'));
  if (r.cpusetCpus) cpu.cpus = r.cpusetCpus;
  if (r.cpusetMems) cpu.mems = r.cpusetMems;
  if (Object.keys(cpu).length) out.cpu = cpu;

  const memory: NonNullable<LinuxResources['memory']> = {};
  // -1 is "no limit" (runc writes -1 on v1, "max" on v2); 0 leaves it unset.
  if (r.memoryLimitInBytes > 0n || r.memoryLimitInBytes === -1n) {
    memory.limit = toSpecNumber(r.memoryLimitInBytes, 'memory_limit_in_bytes');
    if (r.memorySwapLimitInBytes === 0n && host.swapControllerAvailable) memory.swap = memory.limit;
  }
  if (r.memorySwapLimitInBytes !== 0n && host.swapControllerAvailable) {
    memory.swap = toSpecNumber(r.memorySwapLimitInBytes, 'memory_swap_limit_in_bytes');
  }
  if (Object.keys(memory).length) out.memory = memory;

  const hugepages = hugepageLimits(r.hugepageLimits, host);
  if (hugepages.length) out.hugepageLimits = hugepages;
  const unified = Object.entries(r.unified ?? {});
  if (unified.length) {
    if (!host.cgroupV2) throw invalidArgument('resources.unified needs cgroup v2; this host uses cgroup v1');
    out.unified = Object.fromEntries(unified);
  }
  return out;
}

/**
 * The kubelet sends a limit for every page size in /sys/kernel/mm/hugepages, 0 for a pod that asked for
 * none, whether or not the host has the hugetlb controller. Without it, a zero limit is already what
 * the container gets (it cannot use huge pages it was not given) and is dropped, as containerd does with
 * a missing controller; only a non-zero limit, which would be silently unenforced, is refused.
 */
function hugepageLimits(limits: LinuxContainerResources['hugepageLimits'], host: ResourceHost): { pageSize: string; limit: SpecInt }[] {
  for (const h of limits) {
    if (!/^[1-9][0-9]*[KMGT]B$/.test(h.pageSize)) throw invalidArgument(`hugepage_limits.page_size "${h.pageSize}" is not a page size like 2MB or 1GB`);
    if (h.limit < 0n) throw invalidArgument(`hugepage_limits.limit ${h.limit} for ${h.pageSize} is negative`);
  }
  if (host.hugetlbControllerAvailable) {
    return limits.map((h) => ({ pageSize: h.pageSize, limit: toSpecNumber(h.limit, 'hugepage_limits.limit', UINT64_MAX) }));
  }
  const nonZero = limits.filter((h) => h.limit !== 0n);
  if (nonZero.length) {
    const asked = nonZero.map((h) => `${h.pageSize}=${h.limit}`).join(', ');
    throw invalidArgument(`huge pages limits ${asked} cannot be enforced: the hugetlb cgroup controller is missing on this host`);
  }
  if (limits.length) host.hugepageLimitsSkipped?.(limits.map((h) => h.pageSize));
  return [];
}

/** Merges CRI resources (and an optional pids limit) into spec.linux.resources, keeping device rules. */
export const withResources = (r: LinuxContainerResources | undefined, host: ResourceHost, pidsLimit?: number): SpecOpt => (spec) => {
  const target = resourcesOf(spec);
  Object.assign(target, linuxResources(r, host));
  if (pidsLimit && pidsLimit > 0) target.pids = { limit: pidsLimit };
};

/** Sets CPU shares (the pause container gets 2). */
export const withCpuShares = (shares: number): SpecOpt => (spec) => {
  const r = resourcesOf(spec);
  r.cpu = { ...(r.cpu ?? {}), shares };
};

/**
 * `linux.cgroupsPath` for a container under `parent`:
 * - cgroupfs: `<parent>/<id>` (absolute, so runc does not nest it under its own cgroup);
 * - systemd: `<parent slice>:stove:<id>`; the parent must be a slice name (`kubepods-besteffort.slice`
 *   or a path ending in one).
 */
export function cgroupsPathFor(parent: string, id: string, driver: CgroupDriverName): string {
  if (driver === 'systemd') {
    const slice = parent.split('/').filter(Boolean).pop() ?? '';
    if (!slice.endsWith('.slice')) throw invalidArgument(`cgroup_parent "${parent}" is not a systemd slice (the cgroup driver is systemd)`);
    return `${slice}:stove:${id}`;
  }
  if (parent.endsWith('.slice')) throw invalidArgument(`cgroup_parent "${parent}" is a systemd slice but the cgroup driver is cgroupfs`);
  const base = `/${parent.split('/').filter(Boolean).join('/')}`;
  return base === '/' ? `/${id}` : `${base}/${id}`;
}

/** Sets the cgroup path. */
export const withCgroupsPath = (path: string): SpecOpt => (spec) => {
  spec.linux ??= {};
  spec.linux.cgroupsPath = path;
};

/**
 * An OOM score the daemon can actually give: never below its own current value. Lowering
 * oom_score_adj needs CAP_SYS_RESOURCE, and runc fails the whole create if the write fails
 * (containerd `restrict_oom_score_adj`).
 */
export function clampOomScoreAdj(requested: number, own: number): number {
  return Math.max(requested, own);
}

/**
 * clampOomScoreAdj bound to the daemon's own value that logs the first time it changes a request; none
 * (the requested value as it is) when the daemon holds CAP_SYS_RESOURCE and can give any score, as
 * containerd (`restrict_oom_score_adj = false`) and CRI-O give the kubelet's -997 and the pause -998.
 */
export function oomScoreClamper(own: number, effectiveCapabilities: readonly string[], log: Logger): ((requested: number) => number) | undefined {
  if (effectiveCapabilities.includes('CAP_SYS_RESOURCE')) return undefined;
  let warned = false;
  return (requested) => {
    const value = clampOomScoreAdj(requested, own);
    if (value !== requested && !warned) {
      warned = true;
      log.warn('oom_score_adj below the daemon\'s own value is raised to it (no CAP_SYS_RESOURCE to lower it)', { requested, own });
    }
    return value;
  };
}
