/**
 * In-place pod resize (UpdatePodSandboxResources, Kubernetes 1.33+): the kubelet reconfigures the pod's
 * cgroup, then tells the runtime the pod-level resources. Stove records them in the pod's config
 * (`linux.overhead`, `linux.resources`, as a RunPodSandbox with them would have) and writes the pod's
 * limits (the containers' sum plus the overhead) into the pod's own cgroup, its `cgroup_parent`.
 * Kubelets from 1.36 call it before they change the pod cgroup and again, with the previous values, when
 * that fails; they act on every error but UNIMPLEMENTED. So a pod without a cgroup of its own (no
 * `cgroup_parent`, the daemon's shared default, or the root: a kubelet with `--cgroups-per-qos=false`)
 * is Unimplemented: there is nothing Stove could apply the limits to, and the kubelet carries on.
 */
import { LinuxContainerResources } from '../gen/runtime/v1/api.js';
import { unimplemented } from '../common/errors.js';
import { cgroupPathOf, expandSlice } from '../platform/cgroups.js';
import { NO_LIMIT_BYTES } from './cgroup-limits.js';
import type { CgroupDriverName } from '../oci/index.js';
import type { PodDefaults } from './pod-config.js';
import type { SandboxRecord } from './model.js';
import { podConfigOf } from './model.js';

/** The pod's own cgroup: its `cgroup_parent` as a cgroup path; Unimplemented when it has none. */
export function podCgroupPath(record: SandboxRecord, defaults: PodDefaults): string {
  const own = podConfigOf(record).linux?.cgroupParent ?? '';
  const path = own && own !== defaults.cgroupParent ? cgroupOfParent(own, defaults.cgroupDriver) : '/';
  if (path === '/') {
    const why = own ? `its linux.cgroup_parent "${own}" is ${own === defaults.cgroupParent ? 'the default every pod shares' : 'the root cgroup'}` : 'no linux.cgroup_parent in its config';
    throw unimplemented(
      `pod-level resources cannot be applied to sandbox "${record.id}": it has no cgroup of its own (${why}; its containers are under "${record.cgroupParent}")`,
    );
  }
  return path;
}

/** The cgroup path of a `cgroup_parent`: a systemd slice (the last element) or a cgroupfs path. */
export function cgroupOfParent(parent: string, driver: CgroupDriverName): string {
  if (driver === 'systemd') return expandSlice(parent.split('/').filter(Boolean).pop() ?? '');
  return cgroupPathOf(`/${parent.split('/').filter(Boolean).join('/')}`);
}

/** cpu.shares as the kernel takes it (v1 caps it; the v2 weight runc derives from it must stay ≤ 10000). */
const MAX_SHARES = 262_144n;

/**
 * The pod cgroup's limits: the resources plus the overhead, field by field (the kubelet sizes the pod
 * cgroup the same way). A limit the resources leave unset (0) stays unset: overhead alone sets no ceiling.
 *
 * "No limit" stays "no limit" (-1). A kubelet (1.33–1.36) builds the resources of UpdatePodSandboxResources
 * from what it reads back from the pod cgroup minus the overhead, so a pod without a memory or CPU limit
 * arrives as: memory_limit_in_bytes 9223372036854771712 (v1's unlimited memory.limit_in_bytes; another
 * page size gives another value near int64 max), or -1 (v2's "max" read as uint64 max, then cast to
 * int64), each less the overhead's memory; cpu_quota -1 (v1's cfs_quota_us, v2's "max"), less the
 * overhead's quota. Negative values and sums at or above NO_LIMIT_BYTES are therefore "no limit", and no
 * sum leaves int64.
 */
export function podLimits(resources: LinuxContainerResources | undefined, overhead: LinuxContainerResources | undefined): LinuxContainerResources {
  const r = resources ?? LinuxContainerResources.fromPartial({});
  const podOverhead = overhead ?? LinuxContainerResources.fromPartial({});
  const extra = (b: bigint) => (b > 0n ? b : 0n);
  const bytes = (a: bigint, b: bigint) => {
    if (a === 0n) return 0n;
    if (a < 0n) return -1n;
    const sum = a + extra(b);
    return sum >= NO_LIMIT_BYTES ? -1n : sum;
  };
  const hugepages = r.hugepageLimits.map((h) => {
    const sum = h.limit + extra(podOverhead.hugepageLimits.find((x) => x.pageSize === h.pageSize)?.limit ?? 0n);
    // uint64 on the wire: "no limit" is written as such (isNoLimit), never a sum beyond uint64.
    return { pageSize: h.pageSize, limit: sum >= NO_LIMIT_BYTES ? NO_LIMIT_BYTES : sum };
  });
  const quota = r.cpuQuota < 0n ? -1n : r.cpuQuota > 0n ? r.cpuQuota + extra(podOverhead.cpuQuota) : 0n;
  const shares = r.cpuShares > 0n ? r.cpuShares + extra(podOverhead.cpuShares) : 0n;
  return LinuxContainerResources.fromPartial({
    cpuPeriod: r.cpuPeriod || podOverhead.cpuPeriod,
    cpuQuota: quota,
    cpuShares: shares > MAX_SHARES ? MAX_SHARES : shares,
    memoryLimitInBytes: bytes(r.memoryLimitInBytes, podOverhead.memoryLimitInBytes),
    memorySwapLimitInBytes: bytes(r.memorySwapLimitInBytes, podOverhead.memorySwapLimitInBytes),
    cpusetCpus: r.cpusetCpus,
    cpusetMems: r.cpusetMems,
    hugepageLimits: hugepages,
    unified: { ...podOverhead.unified, ...r.unified },
  });
}
