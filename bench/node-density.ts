/**
 * A full node at the CRI level, Stove vs containerd in one run (no kubelet: the daemon's own part).
 *
 *   node dist/bench/node-density.js [--pods 110] [--parallel 10] [--poll-seconds 30] [--windows 3]
 *                                   [--stats-every 10] [--churn 200] [--breakdown 10] [--only stove|containerd]
 *
 * One runtime at a time (Stove first), each on a bridge of its own with the same CNI conflist:
 * 1. `pods` pods of one busybox `sleep` container each (64 MiB limit, pod cgroups made beforehand as a
 *    kubelet makes them), started `parallel` at a time: wall clock to all running.
 * 2. PSS (`/proc/<pid>/smaps_rollup`, shared pages split among the processes mapping them) of the daemon
 *    with its helper processes (its descendants other than monitors) and of the monitors (Stove: a
 *    conmon per container and per pod; containerd: one shim per pod).
 * 3. `windows` windows of `poll-seconds` of a kubelet-like poll on one connection: every second
 *    ListPodSandbox + ListContainers (the PLEG relist) and PodSandboxStatus of every pod and
 *    ContainerStatus of every container (as a relist does for pods that changed: an upper bound for a
 *    steady node), every `stats-every` seconds ListContainerStats + ListPodSandboxStats. CPU time
 *    (user + system, `/proc/<pid>/stat`) per second of the daemon alone, and of all the runtime's
 *    processes (daemon, the children it waited for, helpers, monitors; not the containers), median of
 *    the windows, with the load average beside.
 *    Then each part of the poll alone for `breakdown` seconds (relist, statuses, ListContainerStats,
 *    ListPodSandboxStats, each every second): the daemon's CPU per call, where its time goes.
 * 4. The pods removed, then `churn` pod lifecycles (run → create → start → stop → remove) `parallel` at
 *    a time: the daemon's PSS before and after, and what is left behind (monitor processes, mounts
 *    under the runtime's dirs, network namespaces, pods the runtime still lists).
 *
 * containerd is `CONTAINERD_BIN` (default Debian's /usr/bin/containerd; the cluster's 2.4 is built by
 * `test/e2e/cluster/build.sh containerd` into /var/cache/stove-e2e/bin/<hash>/). By hand, never in
 * `make test`; `make bench-node-density` builds and runs it.
 */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { summarizeProfile, type ProfileSummary } from './lib/cpu-profile.js';
import { loadavg } from 'node:os';
import { PullImageRequest, type PodSandboxConfig } from '../src/gen/runtime/v1/api.js';
import { createCgroup, detectCgroups, removeCgroup } from '../src/platform/cgroups.js';
import { pushBusyboxImage } from '../test/helpers/image-builder.js';
import type { CriClients } from '../test/helpers/cri-client.js';
import { containerdVersion } from './lib/containerd.js';
import { PodBench } from './lib/pods.js';
import { daemonCpuMs, helperPidsOf, mib, pidsWhere, pssOf, runtimeMemory, sleepContainerConfig, type RuntimeMemory } from './lib/processes.js';
import { benchOptions, heading, runBench } from './lib/run.js';
import { median, ms, table } from './lib/stats.js';

const USAGE =
  'node dist/bench/node-density.js [--pods 110] [--parallel 10] [--poll-seconds 30] [--windows 3] [--stats-every 10] [--churn 200] [--breakdown 10] [--only stove|containerd] [--cpu-prof DIR]';
const values = benchOptions(USAGE, {
  pods: { type: 'string', default: '110' },
  parallel: { type: 'string', default: '10' },
  'poll-seconds': { type: 'string', default: '30' },
  windows: { type: 'string', default: '3' },
  'stats-every': { type: 'string', default: '10' },
  churn: { type: 'string', default: '200' },
  breakdown: { type: 'string', default: '10' },
  only: { type: 'string' },
  'cpu-prof': { type: 'string' },
});
const PROBE_MODULE = join(import.meta.dirname, 'lib/daemon-probe.js');
const PODS = Number(values.pods);
const PARALLEL = Number(values.parallel);
const POLL_SECONDS = Number(values['poll-seconds']);
const WINDOWS = Number(values.windows);
const STATS_EVERY = Number(values['stats-every']);
const CHURN = Number(values.churn);
const BREAKDOWN = Number(values.breakdown);

type Name = 'stove' | 'containerd';

interface Runtime {
  name: Name;
  clients: CriClients;
  daemonPid: number;
  /** Dirs the runtime keeps its state and mounts under (for what is left behind). */
  dirs: string[];
  monitorPids(): Promise<number[]>;
}

interface Result extends RuntimeMemory {
  name: Name;
  startMs: number;
  idlePss: number;
  /** Per window: ms of CPU per s, the daemon alone and all processes; the 1-minute load average at its end. */
  windows: { daemon: number; all: number; load: number }[];
  churn?: { before: number; after: number; ms: number; leftovers: string[] };
  /** Per part of the poll alone: the daemon's CPU ms per call, and calls per second. */
  breakdown?: Partial<Record<Part, { perCall: number; calls: number }>>;
  /** `--cpu-prof`: Stove's daemon over the poll windows. */
  profile?: ProfileSummary;
}

const bench = new PodBench();

/** Runs `body` on `items`, `parallel` at a time. */
async function pool<T>(items: T[], parallel: number, body: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(parallel, items.length) }, async () => {
      while (next < items.length) await body(items[next++]!);
    }),
  );
}

interface Pod {
  id: string;
  containers: string[];
  config: PodSandboxConfig;
}

async function startPod(rt: Runtime, image: string, key: string): Promise<Pod> {
  const config = bench.podConfig(rt.name, key);
  await createCgroup(await detectCgroups(), config.linux!.cgroupParent);
  const r = rt.clients.runtime;
  const { podSandboxId } = await r.runPodSandbox({ config, runtimeHandler: '' });
  const { containerId } = await r.createContainer({ podSandboxId, config: sleepContainerConfig(image, 'app'), sandboxConfig: config });
  await r.startContainer({ containerId });
  return { id: podSandboxId, containers: [containerId], config };
}

async function removePod(rt: Runtime, pod: Pod): Promise<void> {
  const r = rt.clients.runtime;
  for (const containerId of pod.containers) await r.stopContainer({ containerId, timeout: 0n });
  await r.stopPodSandbox({ podSandboxId: pod.id });
  await r.removePodSandbox({ podSandboxId: pod.id });
  await removeCgroup(await detectCgroups(), pod.config.linux!.cgroupParent).catch(() => {});
}

const cpuNow = (rt: Runtime, others: number[]) => daemonCpuMs(rt.daemonPid, others);

/** The parts of a poll, each alone in the breakdown (`--breakdown`). */
const PARTS = ['relist', 'statuses', 'ListContainerStats', 'ListPodSandboxStats'] as const;
type Part = (typeof PARTS)[number];

/** The calls of one part of a poll; their number. */
function callsOf(rt: Runtime, pods: Pod[], part: Part, calls: Promise<unknown>[]): number {
  const r = rt.clients.runtime;
  const before = calls.length;
  if (part === 'relist') calls.push(r.listPodSandbox({ filter: undefined }), r.listContainers({ filter: undefined }));
  if (part === 'statuses') {
    for (const pod of pods) {
      calls.push(r.podSandboxStatus({ podSandboxId: pod.id, verbose: false }));
      for (const containerId of pod.containers) calls.push(r.containerStatus({ containerId, verbose: false }));
    }
  }
  if (part === 'ListContainerStats') calls.push(r.listContainerStats({ filter: undefined }));
  if (part === 'ListPodSandboxStats') calls.push(r.listPodSandboxStats({ filter: undefined }));
  return calls.length - before;
}

/**
 * The kubelet-like poll for `seconds`: relist and statuses every second, stats every STATS_EVERY; or
 * only `part`, every second. Returns the number of calls made.
 */
async function poll(rt: Runtime, pods: Pod[], seconds: number, part?: Part): Promise<number> {
  const started = performance.now();
  let made = 0;
  for (let tick = 0; tick < seconds; tick++) {
    const due = started + tick * 1000;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    const calls: Promise<unknown>[] = [];
    const parts: readonly Part[] = part ? [part] : tick % STATS_EVERY === 0 ? PARTS : ['relist', 'statuses'];
    for (const p of parts) made += callsOf(rt, pods, p, calls);
    await Promise.all(calls);
  }
  const left = started + seconds * 1000 - performance.now();
  if (left > 0) await new Promise((resolve) => setTimeout(resolve, left));
  return made;
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 5000));

async function netnsCount(): Promise<number> {
  return (await readdir('/run/netns').catch(() => [])).length;
}

async function mountsUnder(dirs: string[]): Promise<number> {
  const mounts = await readFile('/proc/self/mountinfo', 'utf8');
  return mounts.split('\n').filter((l) => dirs.some((d) => l.split(' ')[4]?.startsWith(d + '/'))).length;
}

async function measureRuntime(rt: Runtime, image: string): Promise<Result> {
  const r = rt.clients.runtime;
  await r.removePodSandbox({ podSandboxId: (await startPod(rt, image, 'warm')).id }).catch(() => {});
  await removeCgroup(await detectCgroups(), bench.podConfig(rt.name, 'warm').linux!.cgroupParent).catch(() => {});
  await settle();
  const idlePss = await pssOf([rt.daemonPid]);

  const t0 = performance.now();
  const pods: Pod[] = [];
  await pool(
    Array.from({ length: PODS }, (_v, i) => i),
    PARALLEL,
    async (i) => {
      pods.push(await startPod(rt, image, String(i)));
    },
  );
  const startMs = performance.now() - t0;
  process.stderr.write(`  ${rt.name}: ${PODS} pods running in ${ms(startMs)}\n`);
  await settle();
  // the daemon's helpers: Stove's; containerd has none that stay
  const monitors = await rt.monitorPids();
  const helpers = await helperPidsOf(rt.daemonPid, monitors);
  const result: Result = { name: rt.name, startMs, idlePss, ...(await runtimeMemory(rt.daemonPid, monitors)), windows: [] };

  await poll(rt, pods, Math.min(5, POLL_SECONDS)); // warm-up
  const profileDir = rt.name === 'stove' ? values['cpu-prof'] : undefined;
  const profilesBefore = profileDir ? new Set(await readdir(profileDir)) : undefined;
  if (profileDir) process.kill(rt.daemonPid, 'SIGWINCH');
  for (let w = 0; w < WINDOWS; w++) {
    const others = [...helpers, ...monitors];
    const before = await cpuNow(rt, others);
    const t = performance.now();
    await poll(rt, pods, POLL_SECONDS);
    const after = await cpuNow(rt, others);
    const s = (performance.now() - t) / 1000;
    result.windows.push({ daemon: (after.daemon - before.daemon) / s, all: (after.all - before.all) / s, load: loadavg()[0]! });
    process.stderr.write(`  ${rt.name}: poll window ${w + 1}: daemon ${((after.daemon - before.daemon) / s).toFixed(1)} ms/s, load ${loadavg()[0]!.toFixed(1)}\n`);
  }
  if (profileDir) {
    process.kill(rt.daemonPid, 'SIGWINCH');
    let file: string | undefined;
    while (!(file = (await readdir(profileDir)).find((f) => f.endsWith('.cpuprofile') && !profilesBefore!.has(f)))) await new Promise((r) => setTimeout(r, 200));
    result.profile = await summarizeProfile(join(profileDir, file));
  }
  if (BREAKDOWN > 0) {
    result.breakdown = {};
    for (const part of PARTS) {
      const before = await cpuNow(rt, []);
      const calls = await poll(rt, pods, BREAKDOWN, part);
      const after = await cpuNow(rt, []);
      result.breakdown[part] = { perCall: (after.daemon - before.daemon) / calls, calls: calls / BREAKDOWN };
    }
  }
  await pool(pods, PARALLEL, (pod) => removePod(rt, pod));

  if (CHURN > 0) {
    const netnsBefore = await netnsCount();
    await settle();
    const before = await pssOf([rt.daemonPid]);
    const tc = performance.now();
    await pool(
      Array.from({ length: CHURN }, (_v, i) => i),
      PARALLEL,
      async (i) => removePod(rt, await startPod(rt, image, `c${i}`)),
    );
    const churnMs = performance.now() - tc;
    await settle();
    const after = await pssOf([rt.daemonPid]);
    const leftovers: string[] = [];
    const listed = (await r.listPodSandbox({ filter: undefined })).items.length + (await r.listContainers({ filter: undefined })).containers.length;
    if (listed) leftovers.push(`${listed} pods and containers listed`);
    const monitorsLeft = (await rt.monitorPids()).length;
    if (monitorsLeft) leftovers.push(`${monitorsLeft} monitor processes`);
    const mounts = await mountsUnder(rt.dirs);
    if (mounts) leftovers.push(`${mounts} mounts under its dirs`);
    const netns = (await netnsCount()) - netnsBefore;
    if (netns > 0) leftovers.push(`${netns} network namespaces in /run/netns`);
    result.churn = { before, after, ms: churnMs, leftovers };
    process.stderr.write(`  ${rt.name}: ${CHURN} lifecycles in ${ms(churnMs)}\n`);
  }
  return result;
}

function report(results: Result[], loadBefore: number[]): void {
  const by = (n: Name) => results.find((x) => x.name === n);
  const [s, c] = [by('stove'), by('containerd')];
  const ratio = (f: (x: Result) => number) => (s && c ? `${(f(s) / f(c)).toFixed(2)}×` : '-');
  const cell = (x: Result | undefined, f: (x: Result) => string) => (x ? f(x) : '-');
  const cpu = (x: Result, k: 'daemon' | 'all') => median(x.windows.map((w) => w[k]));
  const rows = [['', 'containerd', 'stove', 'stove/containerd']];
  const add = (label: string, show: (x: Result) => string, value: (x: Result) => number) => rows.push([label, cell(c, show), cell(s, show), ratio(value)]);
  add(`time to ${PODS} running`, (x) => ms(x.startMs), (x) => x.startMs);
  add('daemon PSS idle', (x) => mib(x.idlePss), (x) => x.idlePss);
  add(`daemon + helpers PSS, ${PODS} pods`, (x) => `${mib(x.daemonPss + x.helpersPss)} (${x.helpers} helpers)`, (x) => x.daemonPss + x.helpersPss);
  add(`daemon RSS, ${PODS} pods`, (x) => mib(x.daemonRss), (x) => x.daemonRss);
  add('monitors PSS', (x) => `${mib(x.monitorsPss)} (${x.monitors})`, (x) => x.monitorsPss);
  add('**total memory**', (x) => mib(x.daemonPss + x.helpersPss + x.monitorsPss), (x) => x.daemonPss + x.helpersPss + x.monitorsPss);
  add('CPU while polled, all processes', (x) => `${cpu(x, 'all').toFixed(1)} ms/s`, (x) => cpu(x, 'all'));
  add('CPU while polled, **the daemon alone**', (x) => `${cpu(x, 'daemon').toFixed(1)} ms/s`, (x) => cpu(x, 'daemon'));
  add('  windows (daemon ms/s)', (x) => x.windows.map((w) => w.daemon.toFixed(0)).join(' / '), () => NaN);
  add('  load average at each window', (x) => x.windows.map((w) => w.load.toFixed(1)).join(' / '), () => NaN);
  if (CHURN > 0) {
    add(`${CHURN} lifecycles, ${PARALLEL} at a time`, (x) => ms(x.churn!.ms), (x) => x.churn!.ms);
    add('daemon PSS before → after', (x) => `${mib(x.churn!.before)} → ${mib(x.churn!.after)}`, (x) => x.churn!.after / x.churn!.before);
    add('left behind', (x) => (x.churn!.leftovers.length ? x.churn!.leftovers.join(', ') : 'nothing'), () => NaN);
  }
  if (BREAKDOWN > 0) {
    for (const part of PARTS) {
      const per = (x: Result) => x.breakdown?.[part]?.perCall ?? NaN;
      add(`  daemon CPU per call: ${part}`, (x) => `${per(x).toFixed(2)} ms`, per);
      add(`  of the poll (ms/s)`, (x) => `${(per(x) * (x.breakdown?.[part]?.calls ?? 0) / (part.endsWith('Stats') ? STATS_EVERY : 1)).toFixed(1)}`, () => NaN);
    }
  }
  for (const row of rows) if (row[3] === 'NaN×') row[3] = '';
  const details = `${PODS} pods of one busybox sleep, ${PARALLEL} at a time; poll ${WINDOWS} × ${POLL_SECONDS} s, stats every ${STATS_EVERY} s; load average before ${loadBefore.map((l) => l.toFixed(1)).join(' ')}`;
  process.stdout.write(heading('Node density, CRI level', details, containerdVersion()) + `${table(rows)}\n`);
  const p = s?.profile;
  if (p) {
    const perS = (v: number) => (v / (p.wallMs / 1000)).toFixed(2);
    const partRows = [['Stove daemon over the poll windows: part (samples with it on the stack)', 'ms', 'ms/s', 'share']];
    for (const [part, v] of [...p.parts].sort((a, b) => b[1] - a[1]).slice(0, 20)) partRows.push([part, v.toFixed(0), perS(v), `${((v / p.busyMs) * 100).toFixed(1)}%`]);
    const selfRows = [['function (self time)', 'ms', 'share']];
    for (const [f, v] of p.selfTop) selfRows.push([f.replace(/\|/g, '\\|'), v.toFixed(0), `${((v / p.busyMs) * 100).toFixed(1)}%`]);
    process.stdout.write(`\nCPU profile: ${(p.wallMs / 1000).toFixed(1)} s, ${p.busyMs.toFixed(0)} ms busy (${perS(p.busyMs)} ms/s)\n\n${table(partRows)}\n\n${table(selfRows)}\n`);
  }
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root (network namespaces, mounts, cgroups)');
  const loadBefore = loadavg();
  try {
    const registry = await bench.startRegistry();
    const image = (await pushBusyboxImage(registry, 'bench/sleep:1', { cmd: ['sleep', '3600'] })).reference;
    const results: Result[] = [];
    if (values.only !== 'containerd') {
      const prof = values['cpu-prof'];
      const stove = await bench.startStove('', 'info', prof ? { NODE_OPTIONS: `--import=${PROBE_MODULE}`, STOVE_BENCH_CPU_PROF: prof } : {});
      const dir = stove.dir;
      const rt: Runtime = {
        name: 'stove',
        clients: stove.clients,
        daemonPid: stove.child.pid!,
        dirs: [dir],
        monitorPids: () => pidsWhere((a) => a[0]!.endsWith('conmon') && a.some((x) => x.startsWith(dir + '/'))),
      };
      await rt.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image } }));
      results.push(await measureRuntime(rt, image));
      await bench.stopStove();
    }
    if (values.only !== 'stove') {
      const containerd = await bench.startContainerd();
      const dir = containerd.dir;
      const rt: Runtime = {
        name: 'containerd',
        clients: containerd.clients,
        daemonPid: containerd.pid,
        dirs: [dir],
        monitorPids: () => pidsWhere((a) => a[0]!.endsWith('containerd-shim-runc-v2') && a.some((x) => x.includes(dir))),
      };
      await rt.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image } }));
      results.push(await measureRuntime(rt, image));
    }
    report(results, loadBefore);
  } finally {
    await bench.cleanup();
  }
}

runBench(main, () => bench.cleanup());
