/**
 * Memory benchmark: the daemon's resident set, Stove vs containerd (Debian's 1.6 with its CRI plugin).
 *
 *   node dist/bench/memory.js [--fresh 5] [--running 100] [--cycles 1000] [--parallel 4] [--idle-seconds 60] [--only stove|containerd]
 *
 * 1. Idle: the daemon's RSS after start-up and a settle, before any pull: for Stove the median of `fresh`
 *    daemons started one after another (the last one goes on to the next phases), with its anonymous
 *    and file-backed parts.
 * 2. Running: `running` busybox sleep containers (5 per pod), the daemon's RSS with them.
 * 3. Burst: `cycles` pod + container lifecycles (RunPodSandbox → CreateContainer → StartContainer →
 *    StopContainer → RemoveContainer → StopPodSandbox → RemovePodSandbox), `parallel` at a time, as
 *    cri-tools' benchmark drives them; RSS sampled every 100 cycles (growth between cycle 200 and the
 *    end is what a leak looks like), then again after `idle-seconds` without work: the high-water mark
 *    a node keeps paying after a burst, or not.
 *
 * Only the daemon's own process is measured (Stove's conmons and containerd's shims are per-container
 * costs, see containers.ts). Everything it starts is stopped and removed afterwards.
 */
import { PullImageRequest } from '../src/gen/runtime/v1/api.js';
import { createCgroup, detectCgroups, removeCgroup } from '../src/platform/cgroups.js';
import { pushBusyboxImage } from '../test/helpers/image-builder.js';
import type { CriClients } from '../test/helpers/cri-client.js';
import { PodBench } from './lib/pods.js';
import { memoryOf, mib, sleepContainerConfig } from './lib/processes.js';
import { benchOptions, heading, runBench } from './lib/run.js';
import { table } from './lib/stats.js';

const values = benchOptions('node dist/bench/memory.js [--fresh 5] [--running 100] [--cycles 1000] [--parallel 4] [--idle-seconds 60] [--only stove|containerd]', {
  fresh: { type: 'string', default: '5' },
  running: { type: 'string', default: '100' },
  cycles: { type: 'string', default: '1000' },
  parallel: { type: 'string', default: '4' },
  'idle-seconds': { type: 'string', default: '60' },
  only: { type: 'string' },
});
const FRESH = Math.max(1, Number(values.fresh));
const RUNNING = Number(values.running);
const CYCLES = Number(values.cycles);
const PARALLEL = Number(values.parallel);
const IDLE_SECONDS = Number(values['idle-seconds']);
const PER_POD = 5;

interface Runtime {
  name: 'stove' | 'containerd';
  clients: CriClients;
  pid: number;
  /** RSS in KiB by phase label, in the order measured. */
  rss: [string, number][];
  /** Idle samples of fresh daemons (KiB). */
  idle: { rss: number; anonymous: number }[];
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

async function burst(rt: Runtime, image: string): Promise<void> {
  let next = 0;
  let done = 0;
  const worker = async () => {
    while (next < CYCLES) {
      const i = next++;
      await lifecycle(rt, image, i);
      done++;
      if (done % 100 === 0) await sample(rt, `after ${done} lifecycles`);
    }
  };
  await Promise.all(Array.from({ length: PARALLEL }, worker));
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
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root (network namespaces, mounts, cgroups)');
  try {
    const registry = await bench.startRegistry();
    const image = (await pushBusyboxImage(registry, 'bench/sleep:1', { cmd: ['sleep', '3600'] })).reference;
    const runtimes: Runtime[] = [];
    if (values.only !== 'containerd') {
      const idle = await freshIdle();
      const stove = await bench.startStove();
      runtimes.push({ name: 'stove', clients: stove.clients, pid: stove.child.pid!, rss: [], idle });
    }
    if (values.only !== 'stove') {
      const containerd = await bench.startContainerd();
      runtimes.push({ name: 'containerd', clients: containerd.clients, pid: containerd.pid, rss: [], idle: [] });
    }
    // One runtime at a time: the other's work does not land in its measurements.
    for (const rt of runtimes) await measure(rt, image);
    report(runtimes);
  } finally {
    await bench.cleanup();
  }
}

runBench(main);
