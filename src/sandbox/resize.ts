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

/**
 * The pod cgroup's limits: the resources plus the overhead, field by field (the kubelet sizes the pod
 * cgroup the same way). A limit the resources leave unset stays unset: overhead alone sets no ceiling.
 */
export function podLimits(resources: LinuxContainerResources | undefined, overhead: LinuxContainerResources | undefined): LinuxContainerResources {
  const r = resources ?? LinuxContainerResources.fromPartial({});
  const podOverhead = overhead ?? LinuxContainerResources.fromPartial({});
  const plus = (a: bigint, b: bigint) => (a > 0n ? a + (b > 0n ? b : 0n) : a);
  const hugepages = r.hugepageLimits.map((h) => ({
    pageSize: h.pageSize,
    limit: h.limit + (podOverhead.hugepageLimits.find((x) => x.pageSize === h.pageSize)?.limit ?? 0n),
  }));
  return LinuxContainerResources.fromPartial({
    cpuPeriod: r.cpuPeriod || podOverhead.cpuPeriod,
    cpuQuota: plus(r.cpuQuota, podOverhead.cpuQuota),
    cpuShares: r.cpuShares > 0n ? r.cpuShares + podOverhead.cpuShares : 0n,
    memoryLimitInBytes: plus(r.memoryLimitInBytes, podOverhead.memoryLimitInBytes),
    memorySwapLimitInBytes: plus(r.memorySwapLimitInBytes, podOverhead.memorySwapLimitInBytes),
    cpusetCpus: r.cpusetCpus,
    cpusetMems: r.cpusetMems,
    hugepageLimits: hugepages,
    unified: { ...podOverhead.unified, ...r.unified },
  });
}
