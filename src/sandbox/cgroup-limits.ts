/**
 * Writes resource limits (the OCI `LinuxResources` shape) straight into an existing cgroup, for cgroups
 * no OCI runtime owns: a pod's own cgroup, resized in place (UpdatePodSandboxResources). The file names
 * and the v1 → v2 conversions are runc's (cpu.shares → cpu.weight, memory+swap → memory.swap.max).
 */
import { access, readFile, writeFile } from 'node:fs/promises';
import { posix } from 'node:path';
import { failedPrecondition, internal, invalidArgument } from '../common/errors.js';
import type { LinuxResources, SpecInt } from '../oci/index.js';
import { dirIn, type CgroupLayout } from '../platform/cgroups.js';

/** One write: the controller's directory key (`cpu`, `memory`…, `unified` on v2), file and value. */
export interface CgroupWrite {
  controller: string;
  file: string;
  value: string;
  /** A first attempt that may be refused (a later write repeats it). */
  mayFail?: boolean;
}

/**
 * The smallest "no limit" a kernel reports in a cgroup byte-limit file: PAGE_COUNTER_MAX (int64 max /
 * page size) pages of 64 KiB. With 4 KiB pages it is 9223372036854771712, what a kubelet reads from an
 * unlimited v1 pod cgroup and sends back in UpdatePodSandboxResources.
 */
export const NO_LIMIT_BYTES = (((1n << 63n) - 1n) / 65536n) * 65536n;

/** A byte limit that means "no limit": -1 (or any negative) or one at or above NO_LIMIT_BYTES. */
export function isNoLimit(bytes: SpecInt): boolean {
  const b = BigInt(bytes);
  return b < 0n || b >= NO_LIMIT_BYTES;
}

/** A byte limit for a v1 file: "-1" when there is none (the kernel's own spelling). */
const v1Bytes = (bytes: SpecInt) => (isNoLimit(bytes) ? '-1' : String(bytes));
/** A byte limit for a v2 file: "max" when there is none. */
const v2Bytes = (bytes: SpecInt) => (isNoLimit(bytes) ? 'max' : String(bytes));

/** runc's cpu.shares (2..262144) → cpu.weight (1..10000). */
export function sharesToWeight(shares: number): number {
  return shares === 0 ? 0 : 1 + Math.floor(((shares - 2) * 9999) / 262142);
}

/** The writes for `r` on cgroup v1, in an order the kernel accepts (see memoryWrites). */
export function v1Writes(r: LinuxResources): CgroupWrite[] {
  const out: CgroupWrite[] = [];
  const cpu = r.cpu;
  if (cpu?.shares) out.push({ controller: 'cpu', file: 'cpu.shares', value: String(cpu.shares) });
  if (cpu?.period) out.push({ controller: 'cpu', file: 'cpu.cfs_period_us', value: String(cpu.period) });
  if (cpu?.quota) out.push({ controller: 'cpu', file: 'cpu.cfs_quota_us', value: cpu.quota > 0 ? String(cpu.quota) : '-1' });
  if (cpu?.cpus) out.push({ controller: 'cpuset', file: 'cpuset.cpus', value: cpu.cpus });
  if (cpu?.mems) out.push({ controller: 'cpuset', file: 'cpuset.mems', value: cpu.mems });
  if (r.memory?.limit) out.push({ controller: 'memory', file: 'memory.limit_in_bytes', value: v1Bytes(r.memory.limit) });
  if (r.memory?.swap) out.push({ controller: 'memory', file: 'memory.memsw.limit_in_bytes', value: v1Bytes(r.memory.swap) });
  for (const h of r.hugepageLimits ?? []) out.push({ controller: 'hugetlb', file: `hugetlb.${h.pageSize}.limit_in_bytes`, value: v1Bytes(h.limit) });
  if (r.pids?.limit) out.push({ controller: 'pids', file: 'pids.max', value: r.pids.limit > 0 ? String(r.pids.limit) : 'max' });
  return out;
}

/** The writes for `r` on cgroup v2 (one directory); `unified` entries last, so they win. */
export function v2Writes(r: LinuxResources): CgroupWrite[] {
  const out: CgroupWrite[] = [];
  const w = (file: string, value: string) => out.push({ controller: 'unified', file, value });
  const cpu = r.cpu;
  if (cpu?.shares) w('cpu.weight', String(sharesToWeight(cpu.shares)));
  if (cpu?.quota || cpu?.period) {
    const quota = cpu.quota && cpu.quota > 0 ? String(cpu.quota) : 'max';
    w('cpu.max', cpu.period ? `${quota} ${cpu.period}` : quota);
  }
  if (cpu?.cpus) w('cpuset.cpus', cpu.cpus);
  if (cpu?.mems) w('cpuset.mems', cpu.mems);
  if (r.memory?.limit) w('memory.max', v2Bytes(r.memory.limit));
  if (r.memory?.swap && r.memory.limit) w('memory.swap.max', swapMax(r.memory.swap, r.memory.limit));
  for (const h of r.hugepageLimits ?? []) w(`hugetlb.${h.pageSize}.max`, v2Bytes(h.limit));
  if (r.pids?.limit) w('pids.max', r.pids.limit > 0 ? String(r.pids.limit) : 'max');
  for (const [file, value] of Object.entries(r.unified ?? {})) w(file, value);
  return out;
}

/** v2 memory.swap.max for a v1-style memory+swap limit: the swap part alone, "max" when either has no limit. */
function swapMax(swap: SpecInt, limit: SpecInt): string {
  if (isNoLimit(swap) || isNoLimit(limit)) return 'max';
  const part = BigInt(swap) - BigInt(limit);
  return String(part > 0n ? part : 0n);
}

/**
 * Applies `r` to the existing cgroup at `path` (an absolute cgroup path), all or nothing: when a write
 * is refused, the files written before it get their previous values back. FailedPrecondition when the
 * cgroup or a controller it needs is missing or the kernel is busy (memory in use above a new limit);
 * InvalidArgument when the kernel refuses a value (a cpuset outside the parent's); Internal otherwise.
 * v1 memory limits are written in the order that keeps memsw ≥ limit at every step.
 */
export async function writeCgroupLimits(layout: CgroupLayout, path: string, r: LinuxResources): Promise<CgroupWrite[]> {
  const writes = layout.version === 2 ? v2Writes(r) : orderV1Memory(v1Writes(r));
  const dirs = new Map<string, string>();
  for (const h of layout.hierarchies) {
    if (h.version !== layout.version) continue;
    for (const c of h.version === 2 ? ['unified'] : h.controllers) dirs.set(c, dirIn(h, path));
  }
  const fileOf = (write: CgroupWrite): string => {
    if (write.file.includes('/')) throw internal(`cgroup file name "${write.file}" is not a plain name`);
    const dir = dirs.get(write.controller);
    if (!dir) throw failedPrecondition(`cannot set ${write.file}: the ${write.controller} cgroup controller is not mounted on this host`);
    return posix.join(dir, write.file);
  };
  const files = writes.map(fileOf);
  for (const dir of new Set(files.map((f) => posix.dirname(f)))) {
    try {
      await access(dir);
    } catch {
      throw failedPrecondition(`cgroup "${path}" does not exist (${dir})`);
    }
  }
  const previous = await readPrevious(writes, files);
  for (const [i, write] of writes.entries()) {
    try {
      await writeFile(files[i]!, write.value);
    } catch (err) {
      if (write.mayFail) continue;
      const undone = await restore(layout, previous.slice(0, i));
      throw refused(write, files[i]!, err as NodeJS.ErrnoException, undone);
    }
  }
  return writes;
}

/** The values of the files about to be written, in write order, once per file, to put back on a failure. */
async function readPrevious(writes: CgroupWrite[], files: string[]): Promise<{ write: CgroupWrite; file: string }[]> {
  const out: { write: CgroupWrite; file: string }[] = [];
  const seen = new Set<string>();
  for (const [i, write] of writes.entries()) {
    const file = files[i]!;
    if (seen.has(file)) continue;
    seen.add(file);
    const value = await readFile(file, 'utf8').then((v) => v.trim(), () => undefined);
    // A file that cannot be read (write-only, or missing: the write fails first) has nothing to restore.
    if (value !== undefined) out.push({ write: { ...write, value }, file });
  }
  return out;
}

/** Writes back the previous values of the files written so far; false when one could not be. */
async function restore(layout: CgroupLayout, written: { write: CgroupWrite; file: string }[]): Promise<boolean> {
  const files = new Map(written.map((w) => [w.write.file, w.file]));
  const writes = written.map((w) => w.write);
  let ok = true;
  for (const write of layout.version === 2 ? writes : orderV1Memory(writes)) {
    await writeFile(files.get(write.file)!, write.value).catch(() => {
      if (!write.mayFail) ok = false;
    });
  }
  return ok;
}

/** The error for a write the kernel refused, by its errno. */
function refused(write: CgroupWrite, file: string, err: NodeJS.ErrnoException, undone: boolean): Error {
  const what = `failed to write ${write.value} to ${file}: ${err.code ?? err.message}`;
  const after = undone ? '; the values written before it were put back' : '; some values written before it could not be put back';
  switch (err.code) {
    case 'EINVAL':
    case 'ERANGE':
      return invalidArgument(`${what} (the kernel refuses this value for this cgroup)${after}`, err);
    case 'EBUSY':
      return failedPrecondition(`${what} (the pod uses more than the new limit, or the cgroup is in use)${after}`, err);
    case 'ENOENT':
      return failedPrecondition(`${what} (the cgroup or its ${write.controller} file is gone)${after}`, err);
    default:
      return internal(`${what}${after}`, err);
  }
}

/**
 * v1 keeps memsw ≥ limit after every write, so raising both must go memsw first and lowering limit
 * first. Not knowing the current values: memsw (may be refused when lowering), limit, memsw again.
 */
function orderV1Memory(writes: CgroupWrite[]): CgroupWrite[] {
  const limit = writes.find((w) => w.file === 'memory.limit_in_bytes');
  const memsw = writes.find((w) => w.file === 'memory.memsw.limit_in_bytes');
  if (!limit || !memsw) return writes;
  const rest = writes.filter((w) => w !== limit && w !== memsw);
  return [...rest, { ...memsw, mayFail: true }, limit, memsw];
}
