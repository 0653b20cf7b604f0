/**
 * Range checks for CRI `LinuxContainerResources`, shared by CreateContainer, UpdateContainerResources
 * and UpdatePodSandboxResources. CRI semantics: 0 (or '') means "not set" and is always accepted; any
 * other value must be one the kernel reads the way the request means it, else INVALID_ARGUMENT naming
 * the field. The bounds are the kernel's (cgroup v1 cpu/cpuset/memory/hugetlb, and v2 where it differs).
 */
import type { LinuxContainerResources } from '../gen/runtime/v1/api.js';
import { invalidArgument } from '../common/errors.js';

/** cpu.cfs_period_us: 1 ms to 1 s. */
const CPU_PERIOD = { min: 1_000n, max: 1_000_000n };
/** cpu.cfs_quota_us: at least 1 ms; -1 is "unlimited". The upper bound is far beyond any period. */
const CPU_QUOTA = { min: 1_000n, max: 1n << 40n };
/** cpu.shares (v1; v2 weights are converted from these). */
const CPU_SHARES = { min: 2n, max: 262_144n };
/**
 * Limits in bytes are int64 (hugepage limits uint64) on the wire and go to the spec digit for digit. The
 * kubelet's "no limit" is near the top: 9223372036854771712 (cgroup v1's unlimited memory.limit_in_bytes).
 */
const MAX_BYTES = (1n << 63n) - 1n;
const MAX_HUGEPAGE_BYTES = (1n << 64n) - 1n;
const OOM_SCORE_ADJ = { min: -1000n, max: 1000n };
/** `0-3,8,10-11`: what cpuset.cpus and cpuset.mems accept. */
const CPU_LIST = /^\d{1,5}(-\d{1,5})?(,\d{1,5}(-\d{1,5})?)*$/;
const MAX_CPU_LIST = 4096;
/** hugetlb page sizes as the kubelet spells them (`2MB`, `1GB`). */
const PAGE_SIZE = /^[1-9]\d{0,5}(KB|MB|GB)$/;
/** A cgroup v2 interface file: `memory.high`, `io.weight`, `cpu.max` (never a path). */
const UNIFIED_KEY = /^[a-z][a-z0-9_]*\.[a-z0-9_.]+$/;
const MAX_UNIFIED_VALUE = 4096;

function inRange(value: bigint, range: { min: bigint; max: bigint }, field: string, what: string): void {
  if (value < range.min || value > range.max) throw invalidArgument(`${field} ${value} is out of range: ${what} (0 leaves it unset)`);
}

function checkCpuList(value: string, field: string): void {
  if (value === '') return;
  if (value.length > MAX_CPU_LIST || !CPU_LIST.test(value)) throw invalidArgument(`${field} "${value.slice(0, 64)}" is not a list like "0-3,8"`);
  for (const part of value.split(',')) {
    const [lo, hi] = part.split('-').map(Number);
    if (hi !== undefined && hi < lo!) throw invalidArgument(`${field} "${value}": range ${part} is reversed`);
  }
}

/**
 * Throws INVALID_ARGUMENT for the first field of `r` the kernel would not take as meant. `prefix` names
 * where the resources sit in the request (`config.linux.resources`, `linux`, `resources`). -1 is "no
 * limit" in cpu_quota and the byte limits. `podLevel`: the `resources` of UpdatePodSandboxResources, where
 * any negative cpu_quota or memory_limit_in_bytes is "no limit" too: the kubelet sends what it read from
 * an unlimited pod cgroup (-1 on cgroup v2) less the pod's overhead (sandbox/resize.ts).
 */
export function validateLinuxResources(r: LinuxContainerResources | undefined, prefix: string, options: { podLevel?: boolean } = {}): void {
  if (!r) return;
  const f = (name: string) => `${prefix}.${name}`;
  const noLimit = (v: bigint) => v === -1n || (options.podLevel === true && v < 0n);
  if (r.cpuPeriod !== 0n) inRange(r.cpuPeriod, CPU_PERIOD, f('cpu_period'), 'must be 1000 to 1000000 microseconds');
  if (r.cpuQuota !== 0n && !noLimit(r.cpuQuota)) inRange(r.cpuQuota, CPU_QUOTA, f('cpu_quota'), 'must be at least 1000 microseconds, or -1 for no limit');
  if (r.cpuShares !== 0n) inRange(r.cpuShares, CPU_SHARES, f('cpu_shares'), 'must be 2 to 262144');
  if (r.memoryLimitInBytes !== 0n && !noLimit(r.memoryLimitInBytes))
    inRange(r.memoryLimitInBytes, { min: 1n, max: MAX_BYTES }, f('memory_limit_in_bytes'), 'must be a positive number of bytes, or -1 for no limit');
  const swap = r.memorySwapLimitInBytes;
  if (swap !== 0n && swap !== -1n) {
    inRange(swap, { min: 1n, max: MAX_BYTES }, f('memory_swap_limit_in_bytes'), 'must be a positive number of bytes, or -1 for no limit');
    if (r.memoryLimitInBytes > 0n && swap < r.memoryLimitInBytes)
      throw invalidArgument(
        `${f('memory_swap_limit_in_bytes')} ${swap} is below ${f('memory_limit_in_bytes')} ${r.memoryLimitInBytes}: it counts memory plus swap`,
      );
  }
  if (r.oomScoreAdj !== 0n) inRange(r.oomScoreAdj, OOM_SCORE_ADJ, f('oom_score_adj'), 'must be -1000 to 1000');
  checkCpuList(r.cpusetCpus, f('cpuset_cpus'));
  checkCpuList(r.cpusetMems, f('cpuset_mems'));
  r.hugepageLimits.forEach((h, i) => {
    if (!PAGE_SIZE.test(h.pageSize)) throw invalidArgument(`${f(`hugepage_limits[${i}].page_size`)} "${h.pageSize.slice(0, 64)}" is not a size like "2MB"`);
    inRange(h.limit, { min: 0n, max: MAX_HUGEPAGE_BYTES }, f(`hugepage_limits[${i}].limit`), 'must be a number of bytes');
  });
  for (const [key, value] of Object.entries(r.unified ?? {})) {
    if (!UNIFIED_KEY.test(key)) throw invalidArgument(`${f('unified')} key "${key.slice(0, 64)}" is not a cgroup interface file name`);
    if (value.length > MAX_UNIFIED_VALUE || /[\0\n]/.test(value))
      throw invalidArgument(`${f('unified')}["${key}"] must be one line of at most ${MAX_UNIFIED_VALUE} bytes`);
  }
}
