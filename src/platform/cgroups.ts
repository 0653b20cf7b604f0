/**
 * cgroups v1 and v2: where a container's cgroup lives in each hierarchy, its statistics, OOM kills, and
 * creating/removing cgroup directories. The one module that forks on the cgroup version.
 *
 * v1 (this kind of machine: hybrid, no systemd) has one hierarchy per controller (cpu and cpuacct apart)
 * plus `name=systemd` and an empty cgroup2 "unified" mount; v2 (most clusters) has one tree.
 * A cgroup is named by the `linux.cgroupsPath` written in the spec: `/a/b/c` (cgroupfs driver) or
 * `slice:prefix:name` (systemd driver, expanded the way runc does).
 */
import { mkdir, readdir, readFile, rmdir, writeFile, access } from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import { posix } from 'node:path';
import { internal, notFound, invalidArgument } from '../common/errors.js';
import { poll } from '../common/poll.js';
import { readMountInfo, type MountInfo } from './proc.js';

/** One mounted cgroup hierarchy. */
export interface CgroupHierarchy {
  version: 1 | 2;
  /** v1 controllers (`cpu`, `memory`, `name=systemd`…); empty for v2. */
  controllers: string[];
  mountPoint: string;
  /** The cgroup mounted there (not `/` inside a cgroup namespace). */
  root: string;
}

/** How the host's cgroups are laid out. */
export interface CgroupLayout {
  /** 2 only for a pure v2 host (cgroup2 on /sys/fs/cgroup); hybrid hosts count as 1, as runc sees them. */
  version: 1 | 2;
  hierarchies: CgroupHierarchy[];
}

const V1_CONTROLLERS = new Set([
  'cpu', 'cpuacct', 'cpuset', 'memory', 'devices', 'freezer', 'net_cls', 'net_prio', 'blkio', 'perf_event', 'hugetlb', 'pids', 'rdma', 'misc',
]);

/** The cgroup layout from mountinfo (pure). */
export function layoutFromMountInfo(mounts: readonly MountInfo[]): CgroupLayout {
  const hierarchies: CgroupHierarchy[] = [];
  const seen = new Set<string>();
  for (const m of mounts) {
    let h: CgroupHierarchy | undefined;
    if (m.fsType === 'cgroup') {
      const controllers = m.superOptions.filter((o) => V1_CONTROLLERS.has(o) || o.startsWith('name='));
      if (controllers.length) h = { version: 1, controllers, mountPoint: m.mountPoint, root: m.root };
    } else if (m.fsType === 'cgroup2') {
      h = { version: 2, controllers: [], mountPoint: m.mountPoint, root: m.root };
    }
    if (!h) continue;
    // The same hierarchy may be mounted twice (bind mounts); keep the first, normally /sys/fs/cgroup/*.
    const key = `${h.version}:${h.controllers.join(',')}`;
    if (seen.has(key)) continue;
    seen.add(key);
    hierarchies.push(h);
  }
  const pureV2 = hierarchies.some((h) => h.version === 2 && h.mountPoint === '/sys/fs/cgroup') || !hierarchies.some((h) => h.version === 1);
  return { version: pureV2 && hierarchies.length > 0 ? 2 : 1, hierarchies };
}

let cachedLayout: Promise<CgroupLayout> | undefined;

/** The host's cgroup layout (read once per process). */
export function detectCgroups(): Promise<CgroupLayout> {
  cachedLayout ??= readMountInfo().then(layoutFromMountInfo);
  return cachedLayout;
}

/**
 * The cgroup path for a spec `cgroupsPath`: cgroupfs paths as they are; systemd `slice:prefix:name`
 * becomes `/<expanded slice>/<prefix>-<name>.scope` (runc `ExpandSlice`).
 */
export function cgroupPathOf(cgroupsPath: string): string {
  const parts = cgroupsPath.split(':');
  if (parts.length === 3 && !cgroupsPath.startsWith('/')) {
    const [slice, prefix, name] = parts as [string, string, string];
    return posix.join(expandSlice(slice || '-.slice'), `${prefix}-${name}.scope`);
  }
  if (!cgroupsPath.startsWith('/')) throw invalidArgument(`cgroup path "${cgroupsPath}" must be absolute`);
  return posix.normalize(cgroupsPath).replace(/(.)\/$/, '$1');
}

/**
 * The cgroup path of a pod's `cgroup_parent`: a systemd slice (its last element, as runc reads it:
 * `/kubepods.slice/kubepods-burstable.slice` → `kubepods-burstable.slice`) expanded, or a cgroupfs path.
 */
export function cgroupParentPath(parent: string): string {
  const last = parent.split('/').filter(Boolean).pop() ?? '';
  return last.endsWith('.slice') ? expandSlice(last) : cgroupPathOf(`/${parent.split('/').filter(Boolean).join('/')}`);
}

/** `a-b-c.slice` → `/a.slice/a-b.slice/a-b-c.slice`; `-.slice` → `/`. */
export function expandSlice(slice: string): string {
  if (!slice.endsWith('.slice') || slice.includes('/')) throw invalidArgument(`invalid systemd slice "${slice}"`);
  const name = slice.slice(0, -'.slice'.length);
  if (name === '-') return '/';
  if (!name || name.startsWith('-') || name.endsWith('-') || name.includes('--')) throw invalidArgument(`invalid systemd slice "${slice}"`);
  let path = '';
  let prefix = '';
  for (const part of name.split('-')) {
    prefix = prefix ? `${prefix}-${part}` : part;
    path += `/${prefix}.slice`;
  }
  return path;
}

/** The directory of cgroup `path` in one hierarchy. */
export function dirIn(h: CgroupHierarchy, path: string): string {
  const rel = h.root !== '/' && (path === h.root || path.startsWith(`${h.root}/`)) ? path.slice(h.root.length) : path;
  return posix.join(h.mountPoint, rel);
}

/** The directories of a cgroup by controller (v1: `cpu`, `memory`, `name=systemd`…; v2: the one key `unified`). */
export function cgroupDirs(layout: CgroupLayout, cgroupsPath: string): Record<string, string> {
  const path = cgroupPathOf(cgroupsPath);
  const out: Record<string, string> = {};
  for (const h of layout.hierarchies) {
    if (layout.version === 2 && h.version !== 2) continue;
    for (const c of h.version === 2 ? ['unified'] : h.controllers) out[c] = dirIn(h, path);
  }
  return out;
}

/** Resource usage of a cgroup. Counters are bigint (CRI uint64); absent parts could not be read. */
export interface CgroupStats {
  cpu?: { usageNs: bigint };
  memory?: {
    usageBytes: bigint;
    /** usage minus inactive file cache: what the kubelet evicts on. */
    workingSetBytes: bigint;
    rssBytes: bigint;
    pageFaults: bigint;
    majorPageFaults: bigint;
    /** undefined = unlimited. */
    limitBytes?: bigint;
    /** limit - working set, when limited. */
    availableBytes?: bigint;
  };
  pids?: { current: bigint; limit?: bigint };
  /** Processes the kernel OOM-killed in this cgroup (needs Linux ≥ 4.13 on v1). */
  oomKills?: bigint;
  /** Pressure stall information (cgroup v2 `*.pressure`); absent where the kernel gives none (v1). */
  pressure?: { cpu?: Pressure; memory?: Pressure; io?: Pressure };
}

/** One line of a `*.pressure` file: stall averages in percent and the total stall time in µs. */
export interface PressureLine {
  avg10: number;
  avg60: number;
  avg300: number;
  total: bigint;
}

/** A `*.pressure` file: `some` (at least one task stalled) and `full` (all of them) lines. */
export interface Pressure {
  some?: PressureLine;
  full?: PressureLine;
}

/** Parses a `*.pressure` file; lines it does not understand are skipped, undefined when none is left. */
export function parsePressure(text: string | undefined): Pressure | undefined {
  if (text === undefined) return undefined;
  const out: Pressure = {};
  for (const line of text.split('\n')) {
    const m = /^(some|full) avg10=(\d+(?:\.\d+)?) avg60=(\d+(?:\.\d+)?) avg300=(\d+(?:\.\d+)?) total=(\d{1,20})\s*$/.exec(line);
    if (!m) continue;
    out[m[1] as 'some' | 'full'] = { avg10: Number(m[2]), avg60: Number(m[3]), avg300: Number(m[4]), total: BigInt(m[5]!) };
  }
  return out.some || out.full ? out : undefined;
}

/** `key value` lines (memory.stat, cpu.stat, memory.events, memory.oom_control) as a map. */
export function parseFlatKeyed(text: string): Map<string, bigint> {
  const out = new Map<string, bigint>();
  for (const line of text.split('\n')) {
    const [k, v] = line.trim().split(/\s+/);
    if (k && v && /^\d+$/.test(v)) out.set(k, BigInt(v));
  }
  return out;
}

function parseCounter(text: string | undefined): bigint | undefined {
  const t = text?.trim();
  return t && /^\d+$/.test(t) ? BigInt(t) : undefined;
}

/** v1 reports "unlimited" as PAGE_COUNTER_MAX pages (≈ 2^63); anything that large means no limit. */
const V1_UNLIMITED = 1n << 62n;

/** Raw v1 file contents (undefined = missing). */
export interface V1Files {
  cpuacctUsage?: string;
  memoryUsage?: string;
  memoryStat?: string;
  memoryLimit?: string;
  memoryOomControl?: string;
  pidsCurrent?: string;
  pidsMax?: string;
}

/** Raw v2 file contents (undefined = missing). */
export interface V2Files {
  cpuStat?: string;
  memoryCurrent?: string;
  memoryStat?: string;
  memoryMax?: string;
  memoryEvents?: string;
  pidsCurrent?: string;
  pidsMax?: string;
  cpuPressure?: string;
  memoryPressure?: string;
  ioPressure?: string;
}

/** Stats from cgroup v1 files (pure). Hierarchical `total_*` counters are preferred over local ones. */
export function statsFromV1(f: V1Files): CgroupStats {
  const out: CgroupStats = {};
  const cpu = parseCounter(f.cpuacctUsage);
  if (cpu !== undefined) out.cpu = { usageNs: cpu };
  const usage = parseCounter(f.memoryUsage);
  if (usage !== undefined) {
    const stat = parseFlatKeyed(f.memoryStat ?? '');
    const pick = (k: string) => stat.get(`total_${k}`) ?? stat.get(k) ?? 0n;
    const limit = parseCounter(f.memoryLimit);
    out.memory = memoryStats(usage, pick('inactive_file'), pick('rss'), pick('pgfault'), pick('pgmajfault'), limit !== undefined && limit < V1_UNLIMITED ? limit : undefined);
  }
  out.pids = pidsStats(f.pidsCurrent, f.pidsMax);
  if (!out.pids) delete out.pids;
  const oom = f.memoryOomControl === undefined ? undefined : parseFlatKeyed(f.memoryOomControl).get('oom_kill');
  if (oom !== undefined) out.oomKills = oom;
  return out;
}

/** Stats from cgroup v2 files (pure). */
export function statsFromV2(f: V2Files): CgroupStats {
  const out: CgroupStats = {};
  const usec = f.cpuStat === undefined ? undefined : parseFlatKeyed(f.cpuStat).get('usage_usec');
  if (usec !== undefined) out.cpu = { usageNs: usec * 1000n };
  const usage = parseCounter(f.memoryCurrent);
  if (usage !== undefined) {
    const stat = parseFlatKeyed(f.memoryStat ?? '');
    const g = (k: string) => stat.get(k) ?? 0n;
    out.memory = memoryStats(usage, g('inactive_file'), g('anon'), g('pgfault'), g('pgmajfault'), parseCounter(f.memoryMax));
  }
  out.pids = pidsStats(f.pidsCurrent, f.pidsMax);
  if (!out.pids) delete out.pids;
  const oom = f.memoryEvents === undefined ? undefined : parseFlatKeyed(f.memoryEvents).get('oom_kill');
  if (oom !== undefined) out.oomKills = oom;
  const pressure = { cpu: parsePressure(f.cpuPressure), memory: parsePressure(f.memoryPressure), io: parsePressure(f.ioPressure) };
  if (pressure.cpu || pressure.memory || pressure.io) out.pressure = pressure;
  return out;
}

function memoryStats(usage: bigint, inactiveFile: bigint, rss: bigint, pgfault: bigint, pgmajfault: bigint, limit: bigint | undefined): NonNullable<CgroupStats['memory']> {
  const workingSet = usage > inactiveFile ? usage - inactiveFile : 0n;
  const m: NonNullable<CgroupStats['memory']> = { usageBytes: usage, workingSetBytes: workingSet, rssBytes: rss, pageFaults: pgfault, majorPageFaults: pgmajfault };
  if (limit !== undefined) {
    m.limitBytes = limit;
    m.availableBytes = limit > workingSet ? limit - workingSet : 0n;
  }
  return m;
}

function pidsStats(current: string | undefined, max: string | undefined): CgroupStats['pids'] {
  const c = parseCounter(current);
  if (c === undefined) return undefined;
  const limit = parseCounter(max);
  return limit === undefined ? { current: c } : { current: c, limit };
}

async function readOptional(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, 'utf8');
  } catch {
    return undefined;
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await access(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Reads a cgroup's stats; NotFound when the cgroup exists in no hierarchy. The files are read
 * synchronously: the kernel makes their text on the spot and never blocks, and the kubelet asks for
 * stats of every container each 10–15 s, which through the thread pool cost four round trips a file.
 */
export async function readCgroupStats(layout: CgroupLayout, cgroupsPath: string): Promise<CgroupStats> {
  const dirs = cgroupDirs(layout, cgroupsPath);
  if (!Object.values(dirs).some((d) => existsSync(d))) throw notFound(`cgroup ${cgroupsPath} not found`);
  if (layout.version === 2) {
    const at = (file: string) => readKernelText(posix.join(dirs.unified!, file));
    return statsFromV2({
      cpuStat: at('cpu.stat'),
      memoryCurrent: at('memory.current'),
      memoryStat: at('memory.stat'),
      memoryMax: at('memory.max'),
      memoryEvents: at('memory.events'),
      pidsCurrent: at('pids.current'),
      pidsMax: at('pids.max'),
      cpuPressure: at('cpu.pressure'),
      memoryPressure: at('memory.pressure'),
      ioPressure: at('io.pressure'),
    });
  }
  const at = (controller: string, file: string) => (dirs[controller] ? readKernelText(posix.join(dirs[controller], file)) : undefined);
  return statsFromV1({
    cpuacctUsage: at('cpuacct', 'cpuacct.usage'),
    memoryUsage: at('memory', 'memory.usage_in_bytes'),
    memoryStat: at('memory', 'memory.stat'),
    memoryLimit: at('memory', 'memory.limit_in_bytes'),
    memoryOomControl: at('memory', 'memory.oom_control'),
    pidsCurrent: at('pids', 'pids.current'),
    pidsMax: at('pids', 'pids.max'),
  });
}

/** A cgroupfs file's text, undefined when it cannot be read (a controller not mounted, a cgroup gone). */
function readKernelText(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

/** OOM kills recorded for a cgroup (v1 memory.oom_control, v2 memory.events); undefined if unknown. */
export async function readOomKills(layout: CgroupLayout, cgroupsPath: string): Promise<bigint | undefined> {
  return oomKillsIn(layout, cgroupDirs(layout, cgroupsPath));
}

/**
 * OOM kills recorded for the cgroup that holds a container's (its pod's): on cgroup v2 counted for every
 * process killed below it, and still there when the container's own cgroup is gone (systemd removes a
 * scope as soon as it is empty). cgroup v1 counts a kill in the victim's own cgroup only.
 */
export async function readParentOomKills(layout: CgroupLayout, cgroupsPath: string): Promise<bigint | undefined> {
  const dirs = Object.fromEntries(Object.entries(cgroupDirs(layout, cgroupsPath)).map(([c, dir]) => [c, posix.dirname(dir)]));
  return oomKillsIn(layout, dirs);
}

async function oomKillsIn(layout: CgroupLayout, dirs: Record<string, string>): Promise<bigint | undefined> {
  const file = layout.version === 2 ? dirs.unified && posix.join(dirs.unified, 'memory.events') : dirs.memory && posix.join(dirs.memory, 'memory.oom_control');
  if (!file) return undefined;
  const text = await readOptional(file);
  return text === undefined ? undefined : parseFlatKeyed(text).get('oom_kill');
}

/** Every directory of a cgroup, one per hierarchy (v1 hierarchies, plus the unified one on hybrid hosts). */
function allDirs(layout: CgroupLayout, cgroupsPath: string): string[] {
  const path = cgroupPathOf(cgroupsPath);
  return [...new Set(layout.hierarchies.map((h) => dirIn(h, path)))];
}

/**
 * Creates a cgroup in every hierarchy of the active version. v1 cpuset cgroups get their parent's cpus
 * and mems (the kernel refuses tasks otherwise); on v2 the parent enables the usual controllers.
 */
export async function createCgroup(layout: CgroupLayout, cgroupsPath: string): Promise<void> {
  const path = cgroupPathOf(cgroupsPath);
  for (const h of layout.hierarchies) {
    if (h.version !== layout.version) continue;
    const dir = dirIn(h, path);
    if (h.version === 2) await enableV2Controllers(h, path);
    const created = await mkdir(dir, { recursive: true });
    if (created && h.controllers.includes('cpuset')) await inheritCpuset(h.mountPoint, created, dir);
  }
}

/** Copies cpuset.cpus/mems down from the first existing ancestor to each new level. */
async function inheritCpuset(mountPoint: string, firstCreated: string, leaf: string): Promise<void> {
  const levels: string[] = [];
  for (let d = leaf; d.length >= firstCreated.length && d !== mountPoint; d = posix.dirname(d)) levels.unshift(d);
  for (const d of levels) {
    for (const f of ['cpuset.cpus', 'cpuset.mems']) {
      const parent = (await readOptional(posix.join(posix.dirname(d), f)))?.trim();
      if (parent) await writeFile(posix.join(d, f), parent);
    }
  }
}

async function enableV2Controllers(h: CgroupHierarchy, path: string): Promise<void> {
  const available = ((await readOptional(posix.join(h.mountPoint, 'cgroup.controllers'))) ?? '').trim().split(/\s+/).filter(Boolean);
  const wanted = ['cpu', 'cpuset', 'memory', 'pids', 'io', 'hugetlb'].filter((c) => available.includes(c));
  const ancestors = path.split('/').filter(Boolean).slice(0, -1);
  let dir = h.mountPoint;
  for (let i = -1; i < ancestors.length; i++) {
    if (i >= 0) {
      dir = posix.join(dir, ancestors[i]!);
      await mkdir(dir, { recursive: true });
    }
    for (const c of wanted) {
      // A controller the parent cannot delegate just stays off; runc reports what it needs itself.
      await writeFile(posix.join(dir, 'cgroup.subtree_control'), `+${c}`).catch(() => {});
    }
  }
}

/** Moves a process into the cgroup in every hierarchy of the active version. */
export async function addProcessToCgroup(layout: CgroupLayout, cgroupsPath: string, pid: number): Promise<void> {
  const path = cgroupPathOf(cgroupsPath);
  for (const h of layout.hierarchies) {
    if (h.version !== layout.version) continue;
    await writeFile(posix.join(dirIn(h, path), 'cgroup.procs'), String(pid));
  }
}

/**
 * Removes a cgroup and everything below it in every hierarchy, deepest first. A cgroup that still holds
 * processes cannot be removed: after a short retry (exiting processes leave the cgroup a moment after
 * they are reaped) that is an Internal error naming the directory. A missing cgroup is not an error.
 */
export async function removeCgroup(layout: CgroupLayout, cgroupsPath: string, opts: { retries?: number; delayMs?: number } = {}): Promise<void> {
  const retries = opts.retries ?? 20;
  const delayMs = opts.delayMs ?? 50;
  for (const top of allDirs(layout, cgroupsPath)) {
    const dirs = await subtree(top);
    dirs.sort((a, b) => b.split('/').length - a.split('/').length);
    for (const d of dirs) await rmdirRetrying(d, retries, delayMs);
  }
}

async function subtree(top: string): Promise<string[]> {
  let entries;
  try {
    entries = await readdir(top, { withFileTypes: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const out = [top];
  for (const e of entries) if (e.isDirectory()) out.push(...(await subtree(posix.join(top, e.name))));
  return out;
}

/** rmdir, again while the cgroup is busy (EBUSY) for up to retries × delayMs; gone already is fine. */
async function rmdirRetrying(dir: string, retries: number, delayMs: number): Promise<void> {
  let busy: unknown;
  const removed = await poll(
    async () => {
      try {
        await rmdir(dir);
        return true;
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ENOENT') return true;
        if (code !== 'EBUSY') throw await cgroupRemovalError(dir, err);
        busy = err;
        return undefined;
      }
    },
    { timeoutMs: retries * delayMs, intervalMs: Math.min(10, delayMs), maxIntervalMs: delayMs },
  );
  if (!removed) throw await cgroupRemovalError(dir, busy);
}

async function cgroupRemovalError(dir: string, err: unknown): Promise<Error> {
  const procs = ((await readOptional(posix.join(dir, 'cgroup.procs'))) ?? '').trim().split('\n').filter(Boolean);
  return internal(`failed to remove cgroup ${dir}: ${(err as Error).message}${procs.length ? ` (processes still inside: ${procs.join(' ')})` : ''}`, err);
}

/** The cgroup path of a process in one v1 controller's hierarchy, or its v2 path (`controller` = ''). */
export function cgroupOfProcess(procCgroupText: string, controller: string): string | undefined {
  for (const line of procCgroupText.split('\n')) {
    const m = /^(\d+):([^:]*):(.*)$/.exec(line.trim());
    if (!m) continue;
    const controllers = m[2]!.split(',');
    if (controller === '' ? m[1] === '0' && m[2] === '' : controllers.includes(controller)) return m[3]!;
  }
  return undefined;
}

/** What the cgroups of this host can enforce, for the spec builders. */
export async function cgroupCapabilities(layout: CgroupLayout): Promise<{ cgroupV2: boolean; swapControllerAvailable: boolean; hugetlbControllerAvailable: boolean }> {
  if (layout.version === 2) {
    const h = layout.hierarchies.find((x) => x.version === 2)!;
    const controllers = ((await readOptional(posix.join(h.mountPoint, 'cgroup.controllers'))) ?? '').split(/\s+/);
    const own = cgroupOfProcess((await readOptional('/proc/self/cgroup')) ?? '', '') ?? '/';
    const swap = (await exists(posix.join(dirIn(h, own), 'memory.swap.max'))) || (await exists(posix.join(h.mountPoint, 'init.scope', 'memory.swap.max')));
    return { cgroupV2: true, swapControllerAvailable: swap, hugetlbControllerAvailable: controllers.includes('hugetlb') };
  }
  const memory = layout.hierarchies.find((h) => h.controllers.includes('memory'));
  const swap = memory ? await exists(posix.join(memory.mountPoint, 'memory.memsw.limit_in_bytes')) : false;
  return { cgroupV2: false, swapControllerAvailable: swap, hugetlbControllerAvailable: layout.hierarchies.some((h) => h.controllers.includes('hugetlb')) };
}
