/** Memory of the runtimes' processes, and the container config every pod benchmark runs. */
import { readdir, readFile } from 'node:fs/promises';
import { ContainerConfig } from '../../src/gen/runtime/v1/api.js';
import { descendantsOf } from '../../src/monitor/exec-sync.js';

/**
 * RSS and PSS of a process in KiB (0 when it is gone), and the anonymous part of the RSS (heap, stacks;
 * the rest is file-backed: the executable's and libraries' pages).
 */
export async function memoryOf(pid: number): Promise<{ rss: number; pss: number; anonymous: number }> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0);
  return { rss: field('Rss'), pss: field('Pss'), anonymous: field('Anonymous') };
}

/** One mapping of /proc/<pid>/smaps: its address range, name ('' for anonymous memory) and resident KiB. */
export interface Mapping {
  range: string;
  name: string;
  rss: number;
  anonymous: number;
}

/**
 * A process's resident memory by kind of mapping (KiB): malloc's main arena (`[heap]`, grown with brk),
 * other anonymous mappings (V8's heap pages and code range, malloc's other arena and its large blocks,
 * thread stacks), the main stack, file-backed pages; with every mapping, its open fds and its threads.
 */
export async function mappingsOf(
  pid: number,
): Promise<{ brk: number; anonMaps: number; codeRange: number; stack: number; fileBacked: number; mappings: Mapping[]; fds: number; threads: number }> {
  const text = await readFile(`/proc/${pid}/smaps`, 'utf8').catch(() => '');
  const mappings: Mapping[] = [];
  for (const line of text.split('\n')) {
    const header = /^([0-9a-f]+-[0-9a-f]+) \S+ \S+ \S+ \d+\s*(.*)$/.exec(line);
    if (header) mappings.push({ range: header[1]!, name: header[2]!, rss: 0, anonymous: 0 });
    const field = /^(Rss|Anonymous):\s+(\d+) kB/.exec(line);
    if (field && mappings.length) mappings[mappings.length - 1]![field[1] === 'Rss' ? 'rss' : 'anonymous'] = Number(field[2]);
  }
  const sum = (pick: (m: Mapping) => boolean, f: (m: Mapping) => number) => mappings.filter(pick).reduce((n, m) => n + f(m), 0);
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  return {
    brk: sum((m) => m.name === '[heap]', (m) => m.rss),
    anonMaps: sum((m) => m.name === '', (m) => m.rss),
    // V8 reserves its code range (JIT code) in one piece of 128–512 MiB; malloc's arenas are at most 64 MiB.
    codeRange: sum((m) => m.name === '' && sizeOf(m.range) > 64 << 20, (m) => m.rss),
    stack: sum((m) => m.name === '[stack]', (m) => m.rss),
    fileBacked: sum((m) => m.name.startsWith('/'), (m) => m.rss - m.anonymous),
    mappings,
    fds: (await readdir(`/proc/${pid}/fd`).catch(() => [])).length,
    threads: Number(/^Threads:\s+(\d+)/m.exec(status)?.[1] ?? 0),
  };
}

/** PSS of the processes, summed (KiB; a process gone counts 0). */
export async function pssOf(pids: number[]): Promise<number> {
  return (await Promise.all(pids.map(memoryOf))).reduce((n, m) => n + m.pss, 0);
}

/** A runtime daemon's helpers: its descendants other than its monitors and what runs under them (the containers). */
export async function helperPidsOf(daemonPid: number, monitors: number[]): Promise<number[]> {
  const under = new Set<number>(monitors);
  for (const m of monitors) for (const pid of await descendantsOf(m)) under.add(pid);
  return (await descendantsOf(daemonPid)).filter((pid) => !under.has(pid));
}

/**
 * A runtime's memory in KiB: the PSS of its daemon, of its helpers (Stove's spawn and mount helpers) and
 * of its monitors (Stove's conmons, containerd's shims; `monitors` names them), with their counts, and
 * the daemon's RSS (its PSS splits the pages of an executable every process of it shares: node's, on a
 * machine running other node processes). The containers' own processes are not counted.
 */
export interface RuntimeMemory {
  daemonPss: number;
  daemonRss: number;
  helpersPss: number;
  helpers: number;
  monitorsPss: number;
  monitors: number;
}

export async function runtimeMemory(daemonPid: number, monitors: number[]): Promise<RuntimeMemory> {
  const helpers = await helperPidsOf(daemonPid, monitors);
  const own = await memoryOf(daemonPid);
  return { daemonPss: own.pss, daemonRss: own.rss, helpersPss: await pssOf(helpers), helpers: helpers.length, monitorsPss: await pssOf(monitors), monitors: monitors.length };
}

/** User + system CPU time of a process (not its children) so far, in ms: steadier than wall time on a busy machine. */
export async function cpuMsOf(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // utime, stime (fields 14, 15) in USER_HZ (100)
}

/**
 * CPU ms so far of a daemon alone, and of it with the children it waited for and `others` (helpers,
 * monitors): `all`.
 */
export async function daemonCpuMs(daemonPid: number, others: number[]): Promise<{ daemon: number; all: number }> {
  const stat = await readFile(`/proc/${daemonPid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const daemon = ((Number(f[11]) + Number(f[12])) * 1000) / 100;
  const children = ((Number(f[13]) + Number(f[14])) * 1000) / 100;
  let rest = 0;
  for (const pid of others) rest += await cpuMsOf(pid).catch(() => 0);
  return { daemon, all: daemon + children + rest };
}

function sizeOf(range: string): number {
  const [start, end] = range.split('-').map((a) => Number.parseInt(a, 16));
  return end! - start!;
}

/** Processes whose command line matches. */
export async function pidsWhere(match: (argv: string[]) => boolean): Promise<number[]> {
  const out: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const argv = (await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '')).split('\0');
    if (match(argv)) out.push(Number(name));
  }
  return out;
}

export const mib = (kib: number) => `${(kib / 1024).toFixed(1)} MiB`;

/** A busybox `sleep` as a kubelet would create it (limits, OOM score, log path, label). */
export function sleepContainerConfig(image: string, name: string): ContainerConfig {
  return ContainerConfig.fromPartial({
    metadata: { name, attempt: 0 },
    image: { image },
    command: ['sleep', '3600'],
    logPath: `${name}/0.log`,
    labels: { 'io.kubernetes.container.name': name },
    linux: { resources: { cpuShares: 2n, memoryLimitInBytes: 64n << 20n, oomScoreAdj: 1000n }, securityContext: { namespaceOptions: {} } },
  });
}
