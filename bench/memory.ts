/**
 * Memory benchmark: the daemon's resident set, Stove vs containerd (Debian's 1.6 with its CRI plugin).
 *
 *   node dist/bench/memory.js [--fresh 5] [--running 100] [--cycles 1000] [--parallel 4] [--sample-every 50] [--growth-limit 1] [--idle-seconds 60] [--only stove|containerd] [--dump DIR [--snapshots 200,1000]] [--v8-flags FLAGS]
 *
 * 1. Idle: the daemon's RSS after start-up and a settle, before any pull: for Stove the median of `fresh`
 *    daemons started one after another (the last one goes on to the next phases), with its anonymous
 *    and file-backed parts.
 * 2. Running: `running` busybox sleep containers (5 per pod), the daemon's RSS with them.
 * 3. Burst: `cycles` pod + container lifecycles (RunPodSandbox → CreateContainer → StartContainer →
 *    StopContainer → RemoveContainer → StopPodSandbox → RemovePodSandbox), `parallel` at a time, as
 *    cri-tools' benchmark drives them, in rounds of `sample-every`; after each round the daemon's memory
 *    by kind of mapping (/proc/<pid>/smaps), its fds, threads and CPU time, and for Stove the same again
 *    after a full garbage collection with V8's own figures (lib/daemon-probe.ts, loaded into the daemon
 *    through NODE_OPTIONS). Then again after `idle-seconds` without work: the high-water mark a node
 *    keeps paying after a burst, or not.
 * 4. Growth from lifecycle 200 to the end, per figure: the change, one-off steps (a move of 2 MiB or
 *    more between two samples, as when V8 resizes its heap), and the least-squares trend without them,
 *    over the whole stretch and its second half. PASS when anonymous memory outside V8's code range
 *    (compiled code, which grows while the lifecycle path tiers up and then levels off) trends at most
 *    `growth-limit` MiB per 1000 lifecycles and fds, threads and libuv handles do not grow.
 *
 * `--gc 0` leaves the daemon's heap alone (the probe is loaded but never asked for a full GC): what
 * it does by itself, one-off steps as V8 resizes its heap included, which the collections every round
 * would otherwise prevent.
 * `--dump DIR` keeps every sample's mappings and V8 figures, the daemon's output, and heap snapshots
 * after the lifecycles `--snapshots` lists; `--v8-flags` are set in the daemon at start-up
 * (v8.setFlagsFromString: tracing flags such as --trace-opt work, flags V8 reads only once do not).
 *
 * Only the daemon's own process is measured (Stove's conmons and containerd's shims are per-container
 * costs, see containers.ts). Everything it starts is stopped and removed afterwards.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { PullImageRequest } from '../src/gen/runtime/v1/api.js';
import { createCgroup, detectCgroups, removeCgroup } from '../src/platform/cgroups.js';
import { pushBusyboxImage } from '../test/helpers/image-builder.js';
import type { CriClients } from '../test/helpers/cri-client.js';
import type { ProbeSample } from './lib/daemon-probe.js';
import { PROBE_MODULE, probe } from './lib/probe-client.js';
import { PodBench } from './lib/pods.js';
import { cpuMsOf, mappingsOf, memoryOf, mib, sleepContainerConfig } from './lib/processes.js';
import { benchOptions, heading, runBench } from './lib/run.js';
import { growth, median, table } from './lib/stats.js';

const USAGE =
  'node dist/bench/memory.js [--fresh 5] [--running 100] [--cycles 1000] [--parallel 4] [--sample-every 50] [--growth-limit 1] [--idle-seconds 60] [--only stove|containerd] [--dump DIR [--snapshots 200,1000]] [--v8-flags FLAGS] [--gc 1|0]';
const values = benchOptions(USAGE, {
  fresh: { type: 'string', default: '5' },
  running: { type: 'string', default: '100' },
  cycles: { type: 'string', default: '1000' },
  parallel: { type: 'string', default: '4' },
  'idle-seconds': { type: 'string', default: '60' },
  'sample-every': { type: 'string', default: '50' },
  'growth-limit': { type: 'string', default: '1' },
  dump: { type: 'string' },
  snapshots: { type: 'string', default: '' },
  'v8-flags': { type: 'string', default: '' },
  gc: { type: 'string', default: '1' },
  only: { type: 'string' },
});
const FRESH = Math.max(1, Number(values.fresh));
const RUNNING = Number(values.running);
const CYCLES = Number(values.cycles);
const PARALLEL = Number(values.parallel);
const IDLE_SECONDS = Number(values['idle-seconds']);
const SAMPLE_EVERY = Number(values['sample-every']);
const GROWTH_LIMIT_MIB = Number(values['growth-limit']);
/** Lifecycle counts after which Stove's heap snapshot goes into the `dump` dir. */
const SNAPSHOTS = values.snapshots.split(',').filter(Boolean).map(Number);
const PER_POD = 5;
/** Memory figures of one burst sample (KiB). */
interface Kinds {
  brk: number;
  anonMaps: number;
  codeRange: number;
  fileBacked: number;
}
interface BurstSample {
  cycle: number;
  /** The daemon's CPU time per lifecycle of the round before the sample (ms). */
  cpuMs: number;
  rss: number;
  anonymous: number;
  fds: number;
  threads: number;
  before: Kinds;
  /** Stove: after a full garbage collection (daemon-probe.ts), with the V8 heap's own figures. */
  afterGc?: Kinds & { anonymous: number; heapUsed: number; heapCommitted: number; external: number; malloced: number; code: number; handles: number };
}

interface Runtime {
  name: 'stove' | 'containerd';
  clients: CriClients;
  pid: number;
  /** RSS in KiB by phase label, in the order measured. */
  rss: [string, number][];
  /** Idle samples of fresh daemons (KiB). */
  idle: { rss: number; anonymous: number }[];
  burst: BurstSample[];
  /** Stove: what the daemon wrote so far. */
  output?: () => string;
  /** Stove: a full GC in the daemon, then its heap figures. */
  probe?: () => Promise<ProbeSample>;
  probeFile?: string;
}

const IDLE_SETTLE_MS = 10_000;

const bench = new PodBench();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function sample(rt: Runtime, label: string): Promise<void> {
  const { rss, anonymous } = await memoryOf(rt.pid);
  rt.rss.push([label, rss]);
  process.stderr.write(`  ${rt.name}: ${label}: ${mib(rss)} (anonymous ${mib(anonymous)}, file-backed ${mib(rss - anonymous)})\n`);
}

/** Runs `count` containers, PER_POD to a pod; returns what to remove. */
async function runContainers(rt: Runtime, image: string, count: number): Promise<{ id: string; parent: string }[]> {
  const r = rt.clients.runtime;
  const layout = await detectCgroups();
  const pods: { id: string; parent: string }[] = [];
  for (let p = 0; p * PER_POD < count; p++) {
    const config = bench.podConfig(rt.name, `m${p}`);
    await createCgroup(layout, config.linux!.cgroupParent);
    const { podSandboxId } = await r.runPodSandbox({ config, runtimeHandler: '' });
    pods.push({ id: podSandboxId, parent: config.linux!.cgroupParent });
    for (let c = 0; c < PER_POD && p * PER_POD + c < count; c++) {
      const { containerId } = await r.createContainer({ podSandboxId, config: sleepContainerConfig(image, `app${c}`), sandboxConfig: config });
      await r.startContainer({ containerId });
    }
  }
  return pods;
}

async function removePods(rt: Runtime, pods: { id: string; parent: string }[]): Promise<void> {
  const layout = await detectCgroups();
  for (const pod of pods) {
    await rt.clients.runtime.stopPodSandbox({ podSandboxId: pod.id }).catch(() => {});
    await rt.clients.runtime.removePodSandbox({ podSandboxId: pod.id }).catch(() => {});
    await removeCgroup(layout, pod.parent).catch(() => {});
  }
}

/** One full pod + container lifecycle. */
async function lifecycle(rt: Runtime, image: string, i: number): Promise<void> {
  const r = rt.clients.runtime;
  const config = bench.podConfig(rt.name, `b${i}`);
  const layout = await detectCgroups();
  await createCgroup(layout, config.linux!.cgroupParent);
  try {
    const { podSandboxId } = await r.runPodSandbox({ config, runtimeHandler: '' });
    const { containerId } = await r.createContainer({ podSandboxId, config: sleepContainerConfig(image, 'app'), sandboxConfig: config });
    await r.startContainer({ containerId });
    await r.containerStatus({ containerId, verbose: false });
    await r.stopContainer({ containerId, timeout: 0n });
    await r.removeContainer({ containerId });
    await r.stopPodSandbox({ podSandboxId });
    await r.removePodSandbox({ podSandboxId });
  } finally {
    await removeCgroup(layout, config.linux!.cgroupParent).catch(() => {});
  }
}

/** `count` lifecycles from `first` on, `PARALLEL` at a time. */
async function lifecycles(rt: Runtime, image: string, first: number, count: number): Promise<void> {
  let next = first;
  const worker = async () => {
    while (next < first + count) await lifecycle(rt, image, next++);
  };
  await Promise.all(Array.from({ length: PARALLEL }, worker));
}

/**
 * The burst, in rounds of SAMPLE_EVERY lifecycles; after each round (all its lifecycles done) one
 * sample, and for Stove a second one after a full garbage collection, where the JavaScript heap is down
 * to what is live.
 */
async function burst(rt: Runtime, image: string): Promise<void> {
  for (let done = 0; done < CYCLES; ) {
    const count = Math.min(SAMPLE_EVERY, CYCLES - done);
    const cpu = await cpuMsOf(rt.pid);
    await lifecycles(rt, image, done, count);
    done += count;
    rt.burst.push(await burstSample(rt, done, ((await cpuMsOf(rt.pid)) - cpu) / count));
    if (done % 100 === 0 || done === CYCLES) await sample(rt, `after ${done} lifecycles`);
  }
}

async function burstSample(rt: Runtime, cycle: number, cpuMs: number): Promise<BurstSample> {
  const before = await mappingsOf(rt.pid);
  if (values.dump) await mkdir(values.dump, { recursive: true });
  // Only a daemon with the probe writes snapshots (it does on the probe's signal, into the dump dir).
  if (values.dump && rt.probe && SNAPSHOTS.includes(cycle)) await writeFile(`${rt.probeFile}.snapshot`, join(values.dump, `${rt.name}-${cycle}.heapsnapshot`));
  const probe = rt.probe ? await rt.probe() : undefined;
  const after = probe ? await mappingsOf(rt.pid) : undefined;
  if (values.dump) await writeFile(join(values.dump, `${rt.name}-${cycle}.json`), JSON.stringify({ before, after, probe }));
  const kinds = (m: Awaited<ReturnType<typeof mappingsOf>>) => ({ brk: m.brk, anonMaps: m.anonMaps, codeRange: m.codeRange, fileBacked: m.fileBacked });
  return {
    cycle,
    cpuMs,
    rss: before.brk + before.anonMaps + before.stack + before.fileBacked,
    anonymous: before.brk + before.anonMaps + before.stack,
    fds: before.fds,
    threads: before.threads,
    before: kinds(before),
    ...(after && probe
      ? {
          afterGc: {
            ...kinds(after),
            anonymous: after.brk + after.anonMaps + after.stack,
            heapUsed: probe.usage.heapUsed / 1024,
            heapCommitted: Object.values(probe.spaces).reduce((n, s) => n + s.committed, 0) / 1024,
            external: probe.usage.external / 1024,
            malloced: probe.mallocedMemory / 1024,
            code: (probe.codeAndMetadata + probe.bytecodeAndMetadata) / 1024,
            handles: Object.values(probe.resources).reduce((n, c) => n + c, 0),
          },
        }
      : {}),
  };
}

/** The idle RSS of a daemon that has just started (and settled), before any pull. */
async function sampleIdle(name: string, idle: Runtime['idle'], pid: number): Promise<void> {
  await sleep(IDLE_SETTLE_MS);
  const m = await memoryOf(pid);
  idle.push(m);
  process.stderr.write(`  ${name}: idle: ${mib(m.rss)} (anonymous ${mib(m.anonymous)})\n`);
}

/** Stove's idle samples of `FRESH - 1` daemons started and stopped one after another. */
async function freshIdle(): Promise<Runtime['idle']> {
  const idle: Runtime['idle'] = [];
  for (let i = 1; i < FRESH; i++) {
    const stove = await bench.startTransientStove();
    try {
      await sampleIdle('stove', idle, stove.child.pid!);
    } finally {
      await stove.stop();
      await stove.cleanup();
    }
  }
  return idle;
}

async function measure(rt: Runtime, image: string): Promise<void> {
  await sampleIdle(rt.name, rt.idle, rt.pid);
  await rt.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image } }));
  const pods = await runContainers(rt, image, RUNNING);
  await sleep(5_000);
  await sample(rt, `${RUNNING} running containers`);
  await removePods(rt, pods);
  await burst(rt, image);
  await sleep(IDLE_SECONDS * 1000);
  await sample(rt, `${IDLE_SECONDS} s after the burst`);
  if (values.dump && rt.output) await writeFile(join(values.dump, `${rt.name}.log`), rt.output());
}

function report(runtimes: Runtime[]): void {
  const labels = runtimes[0]!.rss.map(([label]) => label).filter((l) => !/^after \d+ lifecycles$/.test(l) || l === 'after 200 lifecycles' || l === `after ${CYCLES} lifecycles`);
  const rows = [['daemon RSS', ...runtimes.map((r) => r.name)]];
  // The median run by RSS, with its own split.
  const idle = runtimes.map((r) => [...r.idle].sort((a, b) => a.rss - b.rss)[Math.floor((r.idle.length - 1) / 2)]!);
  rows.push([`idle (median of ${FRESH} fresh daemons for stove)`, ...idle.map((m) => mib(m.rss))]);
  rows.push(['idle: anonymous', ...idle.map((m) => mib(m.anonymous))]);
  rows.push(['idle: file-backed', ...idle.map((m) => mib(m.rss - m.anonymous))]);
  for (const label of labels) rows.push([label, ...runtimes.map((r) => mib(r.rss.find(([l]) => l === label)?.[1] ?? 0))]);
  process.stdout.write(
    heading('Memory benchmark', `${RUNNING} running containers; ${CYCLES} pod + container lifecycles, ${PARALLEL} in parallel`) + `${table(rows)}\n`,
  );
  for (const rt of runtimes) process.stdout.write(`\n${growthReport(rt)}`);
}

/** From this lifecycle on, the burst should not grow the daemon. */
const STEADY_FROM = 200;
/** A move of at least this much between two samples (KiB) is a one-off step, not a trend. */
const STEP_KIB = 2048;
/**
 * How fast a count may trend up per 1000 lifecycles before it is a leak: fds and threads hold still
 * (36 and 11 through 3000 lifecycles), libuv's handles and requests are mostly timers that come and go
 * (9–82 between rounds), so they get a margin that still catches one left behind every 10 lifecycles.
 */
const COUNT_LIMIT = 5;
const HANDLES_LIMIT = 100;

type Series = [label: string, pick: (b: BurstSample) => number | undefined, unit: 'KiB' | 'count'];

// The series the verdict judges: anonymous memory without V8's code range (compiled code grows while
// the lifecycle path tiers up, then levels off), after the full GC when there is one, and the counts.
const ANONYMOUS_BUT_CODE: Series = ['  without the code range', (b) => b.anonymous - b.before.codeRange, 'KiB'];
const ANONYMOUS_BUT_CODE_AFTER_GC: Series = ['  without the code range', (b) => b.afterGc && b.afterGc.anonymous - b.afterGc.codeRange, 'KiB'];
const HANDLES: Series = ['  libuv handles and requests', (b) => b.afterGc?.handles, 'count'];
const FDS: Series = ['open fds', (b) => b.fds, 'count'];
const THREADS: Series = ['threads', (b) => b.threads, 'count'];
const JUDGED_KIB = (rt: Runtime) => (rt.probe ? ANONYMOUS_BUT_CODE_AFTER_GC : ANONYMOUS_BUT_CODE);
const JUDGED_COUNTS: [Series, number][] = [
  [HANDLES, HANDLES_LIMIT],
  [FDS, COUNT_LIMIT],
  [THREADS, COUNT_LIMIT],
];

const SERIES: Series[] = [
  ['RSS', (b) => b.rss, 'KiB'],
  ['anonymous', (b) => b.anonymous, 'KiB'],
  ['  V8 code range (compiled code)', (b) => b.before.codeRange, 'KiB'],
  ANONYMOUS_BUT_CODE,
  ['file-backed', (b) => b.before.fileBacked, 'KiB'],
  ['after a full GC: anonymous', (b) => b.afterGc?.anonymous, 'KiB'],
  ['  V8 code range (compiled code)', (b) => b.afterGc?.codeRange, 'KiB'],
  ANONYMOUS_BUT_CODE_AFTER_GC,
  ['  of which malloc [heap]', (b) => b.afterGc?.brk, 'KiB'],
  ['  V8 heap without code and bytecode', (b) => b.afterGc && b.afterGc.heapUsed - b.afterGc.code, 'KiB'],
  ['  V8: code and bytecode', (b) => b.afterGc?.code, 'KiB'],
  ['  V8: malloced', (b) => b.afterGc?.malloced, 'KiB'],
  ['  external (buffers, sources)', (b) => b.afterGc?.external, 'KiB'],
  HANDLES,
  FDS,
  THREADS,
];

/**
 * Growth of each of the daemon's figures from lifecycle STEADY_FROM to the end: the change, the one-off
 * steps in it, the trend without them over the whole stretch and over its second half (a trend that
 * fades is warm-up, one that keeps its pace is a leak). The verdict: anonymous memory outside V8's code
 * range (after a full GC for Stove) trends at most `growth-limit` MiB per 1000 lifecycles, and fds,
 * threads and handles do not grow.
 */
function growthReport(rt: Runtime): string {
  const steady = rt.burst.filter((b) => b.cycle >= STEADY_FROM);
  if (steady.length < 4) return `${rt.name}: too few samples from lifecycle ${STEADY_FROM} on to judge growth\n`;
  const last = steady[steady.length - 1]!.cycle;
  const half = steady.filter((b) => b.cycle >= (STEADY_FROM + last) / 2);
  const rows = [[`${rt.name}: lifecycle ${STEADY_FROM} → ${last}`, `at ${STEADY_FROM}`, `at ${last}`, 'change', `steps ≥ ${mib(STEP_KIB)}`, 'trend per 1000', 'second half']];
  const trends = new Map<Series, number>();
  for (const series of SERIES) {
    const [label, pick, unit] = series;
    const points = (samples: BurstSample[]) => samples.flatMap((b) => (pick(b) === undefined ? [] : [{ x: b.cycle, y: pick(b)! }]));
    const all = points(steady);
    if (all.length < 4) continue;
    const g = growth(all, unit === 'KiB' ? STEP_KIB : Infinity);
    const late = growth(points(half), unit === 'KiB' ? STEP_KIB : Infinity);
    trends.set(series, g.slope * 1000);
    const fmt = unit === 'KiB' ? (v: number) => mib(v) : (v: number) => v.toFixed(0);
    const signed = (v: number) => `${v >= 0 ? '+' : '−'}${fmt(Math.abs(v))}`;
    const steps = g.steps.map((st) => `${signed(st.by)} at ${st.x}`).join(', ') || '–';
    rows.push([label, fmt(all[0]!.y), fmt(all[all.length - 1]!.y), signed(g.change), steps, signed(g.slope * 1000), signed(late.slope * 1000)]);
  }
  const judged = trends.get(JUDGED_KIB(rt))!;
  // The handles come from the probe: without it (--gc 0, containerd) they are not judged, nor said steady.
  const counted = JUDGED_COUNTS.filter(([series]) => trends.has(series));
  const grown = counted.filter(([series, limit]) => trends.get(series)! > limit).map(([[label]]) => label.trim());
  const pass = judged <= GROWTH_LIMIT_MIB * 1024 && grown.length === 0;
  const cpu = median(steady.map((b) => b.cpuMs));
  const verdict =
    `${rt.name}: ${pass ? 'PASS' : 'FAIL'} (no growth): anonymous memory without V8's code range${rt.probe ? ' after a full GC' : ''} trends ` +
    `${mib(judged)} per 1000 lifecycles (limit ${GROWTH_LIMIT_MIB} MiB)` +
    (grown.length ? `; growing: ${grown.join(', ')}` : `; ${counted.map(([[label]]) => label.trim()).join(', ')} steady`) +
    `. Daemon CPU per lifecycle: ${cpu.toFixed(1)} ms (median of the rounds).` +
    (rt.name === 'stove' && !rt.probe ? ' Without the full GCs the trend includes the heap V8 keeps beyond what is live; --gc 1 judges a leak.' : '');
  return `${table(rows)}\n\n${verdict}\n`;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root (network namespaces, mounts, cgroups)');
  try {
    const registry = await bench.startRegistry();
    const image = (await pushBusyboxImage(registry, 'bench/sleep:1', { cmd: ['sleep', '3600'] })).reference;
    const runtimes: Runtime[] = [];
    const probeFile = join(bench.logs, 'probe.jsonl');
    await mkdir(bench.logs, { recursive: true });
    if (values.only !== 'containerd') {
      const idle = await freshIdle();
      const stove = await bench.startStove('', 'info', { NODE_OPTIONS: `--import=${PROBE_MODULE}`, STOVE_BENCH_PROBE: probeFile, STOVE_BENCH_V8_FLAGS: values['v8-flags'] });
      runtimes.push({ name: 'stove', clients: stove.clients, pid: stove.child.pid!, rss: [], idle, burst: [], probe: values.gc === '0' ? undefined : () => probe(stove.child.pid!, probeFile), probeFile, output: () => stove.output() });
    }
    if (values.only !== 'stove') {
      const containerd = await bench.startContainerd();
      runtimes.push({ name: 'containerd', clients: containerd.clients, pid: containerd.pid, rss: [], idle: [], burst: [] });
    }
    // One runtime at a time: the other's work does not land in its measurements.
    for (const rt of runtimes) await measure(rt, image);
    report(runtimes);
  } finally {
    await bench.cleanup();
  }
}

runBench(main, () => bench.cleanup());
