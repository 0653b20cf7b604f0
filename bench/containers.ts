/**
 * Container benchmark: Stove vs containerd (Debian's 1.6 with its CRI plugin) in one run.
 *
 *   node dist/bench/containers.js [--cycles 20] [--warmup 2] [--pods 50] [--per-pod 2] [--only stove|containerd]
 *
 * 1. Start latency: `cycles` sequential pod + container starts of a busybox `sleep` (RunPodSandbox →
 *    CreateContainer → StartContainer), then StopContainer → RemoveContainer → StopPodSandbox →
 *    RemovePodSandbox; median and p90 per step and the Stove/containerd ratio.
 * 2. Scale: `pods` × `per-pod` running containers; ListContainers and ListContainerStats latency; the
 *    daemon's RSS idle and with them; memory per container of the daemon plus its monitor processes
 *    (Stove: conmon for every container and pause; containerd: one containerd-shim-runc-v2 per pod),
 *    as RSS and as PSS (shared pages split between the processes that map them).
 *
 * Both runtimes use the Debian CNI plugins (bridge + host-local + portmap, a bridge and range each),
 * the same images from a loopback registry, and pod cgroups made beforehand as a kubelet makes them.
 * Everything it starts is stopped and removed afterwards.
 */
import { PullImageRequest } from '../src/gen/runtime/v1/api.js';
import { memoryOf, mib, pidsWhere, sleepContainerConfig } from './lib/processes.js';
import { createCgroup, detectCgroups, removeCgroup } from '../src/platform/cgroups.js';
import { pushBusyboxImage } from '../test/helpers/image-builder.js';
import type { CriClients } from '../test/helpers/cri-client.js';
import { PodBench, runCycles, stoveStepMedians, timed } from './lib/pods.js';
import { benchOptions, heading, runBench } from './lib/run.js';
import { comparisonRows, median, ms, table } from './lib/stats.js';

const values = benchOptions('node dist/bench/containers.js [--cycles 20] [--warmup 2] [--pods 50] [--per-pod 2] [--only stove|containerd]', {
  cycles: { type: 'string', default: '20' },
  warmup: { type: 'string', default: '2' },
  pods: { type: 'string', default: '50' },
  'per-pod': { type: 'string', default: '2' },
  only: { type: 'string' },
});
const CYCLES = Number(values.cycles);
const WARMUP = Number(values.warmup);
const PODS = Number(values.pods);
const PER_POD = Number(values['per-pod']);

const STEPS = ['RunPodSandbox', 'CreateContainer', 'StartContainer', 'StopContainer', 'RemoveContainer', 'StopPodSandbox', 'RemovePodSandbox'] as const;
type Step = (typeof STEPS)[number];

interface Runtime {
  name: 'stove' | 'containerd';
  clients: CriClients;
  times: Record<Step | 'start total', number[]>;
  /** Pids of the daemon and of its per-container/per-pod monitor processes. */
  daemonPid(): number;
  monitorPids(): Promise<number[]>;
  scale?: { listContainers: number; listContainerStats: number; idle: Memory; loaded: Memory; containers: number };
}

interface Memory {
  daemonRss: number;
  monitorsRss: number;
  daemonPss: number;
  monitorsPss: number;
  monitors: number;
}

const bench = new PodBench();

async function cycle(rt: Runtime, image: string, i: number, record: boolean): Promise<void> {
  const config = bench.podConfig(rt.name, i);
  const layout = await detectCgroups();
  await createCgroup(layout, config.linux!.cgroupParent);
  const r = rt.clients.runtime;
  try {
    const t = performance.now();
    const { podSandboxId } = await timed(rt.times, 'RunPodSandbox', () => r.runPodSandbox({ config, runtimeHandler: '' }), record);
    const { containerId } = await timed(rt.times, 'CreateContainer', () => r.createContainer({ podSandboxId, config: sleepContainerConfig(image, 'app'), sandboxConfig: config }), record);
    await timed(rt.times, 'StartContainer', () => r.startContainer({ containerId }), record);
    if (record) rt.times['start total'].push(performance.now() - t);
    await timed(rt.times, 'StopContainer', () => r.stopContainer({ containerId, timeout: 0n }), record);
    await timed(rt.times, 'RemoveContainer', () => r.removeContainer({ containerId }), record);
    await timed(rt.times, 'StopPodSandbox', () => r.stopPodSandbox({ podSandboxId }), record);
    await timed(rt.times, 'RemovePodSandbox', () => r.removePodSandbox({ podSandboxId }), record);
  } finally {
    await removeCgroup(layout, config.linux!.cgroupParent).catch(() => {});
  }
}

async function measure(rt: Runtime): Promise<Memory> {
  const daemon = await memoryOf(rt.daemonPid());
  const pids = await rt.monitorPids();
  const monitors = await Promise.all(pids.map(memoryOf));
  return {
    daemonRss: daemon.rss,
    daemonPss: daemon.pss,
    monitorsRss: monitors.reduce((a, m) => a + m.rss, 0),
    monitorsPss: monitors.reduce((a, m) => a + m.pss, 0),
    monitors: pids.length,
  };
}

async function settle(): Promise<void> {
  if (global.gc) global.gc();
  await new Promise((r) => setTimeout(r, 3000));
}

/** Runs PODS × PER_POD containers, times the list calls, measures memory, and removes everything. */
async function scale(rt: Runtime, image: string): Promise<void> {
  const r = rt.clients.runtime;
  await settle();
  const idle = await measure(rt);
  const layout = await detectCgroups();
  const pods: { id: string; parent: string }[] = [];
  try {
    for (let p = 0; p < PODS; p++) {
      const config = bench.podConfig(rt.name, `s${p}`);
      await createCgroup(layout, config.linux!.cgroupParent);
      const { podSandboxId } = await r.runPodSandbox({ config, runtimeHandler: '' });
      pods.push({ id: podSandboxId, parent: config.linux!.cgroupParent });
      for (let c = 0; c < PER_POD; c++) {
        const { containerId } = await r.createContainer({ podSandboxId, config: sleepContainerConfig(image, `app${c}`), sandboxConfig: config });
        await r.startContainer({ containerId });
      }
      if ((p + 1) % 10 === 0) process.stderr.write(`  ${rt.name}: ${p + 1}/${PODS} pods running\n`);
    }
    const containers = (await r.listContainers({ filter: undefined })).containers.length;
    const list: number[] = [];
    for (let i = 0; i < 30; i++) {
      const t = performance.now();
      await r.listContainers({ filter: undefined });
      list.push(performance.now() - t);
    }
    const stats: number[] = [];
    for (let i = 0; i < 10; i++) {
      const t = performance.now();
      const res = await r.listContainerStats({ filter: undefined });
      stats.push(performance.now() - t);
      if (res.stats.length !== containers) throw new Error(`${rt.name}: ListContainerStats gave ${res.stats.length} of ${containers}`);
    }
    await settle();
    const loaded = await measure(rt);
    rt.scale = { listContainers: median(list), listContainerStats: median(stats), idle, loaded, containers };
  } finally {
    for (const pod of pods) {
      await r.stopPodSandbox({ podSandboxId: pod.id }).catch(() => {});
      await r.removePodSandbox({ podSandboxId: pod.id }).catch(() => {});
      await removeCgroup(layout, pod.parent).catch(() => {});
    }
  }
}

function report(runtimes: Runtime[], stoveOutput: string): void {
  const times = (name: Runtime['name']) => runtimes.find((r) => r.name === name)?.times;
  const label = (step: string) => (step === 'start total' ? '**pod + container start** (runp → create → start)' : step);
  const rows = comparisonRows('step', ['start total', ...STEPS] as const, times('containerd'), times('stove'), label);
  process.stdout.write(
    heading('Container benchmark', `${CYCLES} cycles after ${WARMUP} warm-up; busybox sleep, 64 MiB limit, bridge + host-local + portmap`) + `${table(rows)}\n`,
  );
  if (times('stove')) {
    const steps = [['CreateContainer step', 'median'], ...stoveStepMedians(stoveOutput, 'container created')];
    process.stdout.write(`\nWhere Stove's CreateContainer time goes (rootfs: overlay mount and image hold; spec: user, mounts, config.json; conmon: runc create, overlapping the first two):\n\n${table(steps)}\n`);
  }
  const scaled = runtimes.filter((r) => r.scale);
  if (!scaled.length) return;
  const n = scaled[0]!.scale!.containers;
  const rows2 = [['with ' + n + ' running containers (' + PODS + ' pods)', ...scaled.map((r) => r.name)]];
  const add = (label: string, f: (x: NonNullable<Runtime['scale']>) => string) => rows2.push([label, ...scaled.map((r) => f(r.scale!))]);
  add('ListContainers median', (x) => ms(x.listContainers));
  add('ListContainerStats median', (x) => ms(x.listContainerStats));
  add('daemon RSS idle', (x) => mib(x.idle.daemonRss));
  add('daemon RSS with the containers', (x) => mib(x.loaded.daemonRss));
  add('monitor processes', (x) => String(x.loaded.monitors));
  add('monitors RSS total', (x) => mib(x.loaded.monitorsRss));
  add('per container: daemon growth + monitors, RSS', (x) => mib((x.loaded.daemonRss - x.idle.daemonRss + x.loaded.monitorsRss - x.idle.monitorsRss) / x.containers));
  add('per container: daemon growth + monitors, PSS', (x) => mib((x.loaded.daemonPss - x.idle.daemonPss + x.loaded.monitorsPss - x.idle.monitorsPss) / x.containers));
  process.stdout.write(`\n${table(rows2)}\n`);
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root (network namespaces, mounts, cgroups)');
  try {
    const registry = await bench.startRegistry();
    const image = (await pushBusyboxImage(registry, 'bench/sleep:1', { cmd: ['sleep', '3600'] })).reference;
    const runtimes: Runtime[] = [];
    const empty = () => Object.fromEntries([...STEPS, 'start total'].map((k) => [k, [] as number[]])) as Runtime['times'];
    if (values.only !== 'containerd') {
      const stove = await bench.startStove();
      const dir = stove.dir;
      const pid = stove.child.pid!;
      runtimes.push({
        name: 'stove',
        clients: stove.clients,
        times: empty(),
        daemonPid: () => pid,
        monitorPids: () => pidsWhere((a) => a[0]!.endsWith('conmon') && a.some((x) => x.startsWith(dir + '/'))),
      });
    }
    if (values.only !== 'stove') {
      const containerd = await bench.startContainerd();
      const dir = containerd.dir;
      runtimes.push({
        name: 'containerd',
        clients: containerd.clients,
        times: empty(),
        daemonPid: () => containerd.pid,
        monitorPids: () => pidsWhere((a) => a[0]!.endsWith('containerd-shim-runc-v2') && a.some((x) => x.includes(dir))),
      });
    }
    for (const rt of runtimes) await rt.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image } }));
    await runCycles(runtimes, WARMUP, CYCLES, (rt, i, record) => cycle(rt, image, i, record));
    if (PODS > 0) for (const rt of runtimes) await scale(rt, image);
    report(runtimes, bench.stove?.output() ?? '');
  } finally {
    await bench.cleanup();
  }
}

runBench(main, () => bench.cleanup());
