/**
 * Read-path benchmark: the status and list RPCs a kubelet polls, Stove vs containerd (Debian's 1.6
 * with its CRI plugin) in one run, with `pods` pods of `per-pod` running containers each.
 *
 *   node dist/bench/read-path.js [--calls 1000] [--warmup 200] [--pods 10] [--per-pod 2] [--only stove|containerd] [--rpcs Version,ListImages]
 *
 * Each RPC is called `calls` times per runtime, the runtimes taking turns call by call (who goes first
 * alternates too), so a machine shared with other work slows both alike; medians, p90 and the
 * Stove/containerd ratio of the latency, and the daemon's own CPU time per call (user + system, from
 * /proc/<pid>/stat, over the whole run of an RPC), which a busy machine disturbs far less than latency.
 */
import { ImageStatusRequest, PullImageRequest } from '../src/gen/runtime/v1/api.js';
import { createCgroup, detectCgroups, removeCgroup } from '../src/platform/cgroups.js';
import { pushBusyboxImage } from '../test/helpers/image-builder.js';
import type { CriClients } from '../test/helpers/cri-client.js';
import { PodBench } from './lib/pods.js';
import { cpuMsOf, sleepContainerConfig } from './lib/processes.js';
import { benchOptions, heading, runBench } from './lib/run.js';
import { comparisonRows, table } from './lib/stats.js';

const values = benchOptions('node dist/bench/read-path.js [--calls 1000] [--warmup 200] [--pods 10] [--per-pod 2] [--only stove|containerd] [--rpcs Version,ListImages]', {
  calls: { type: 'string', default: '1000' },
  warmup: { type: 'string', default: '200' },
  pods: { type: 'string', default: '10' },
  'per-pod': { type: 'string', default: '2' },
  only: { type: 'string' },
  rpcs: { type: 'string' },
});
const CALLS = Number(values.calls);
const WARMUP = Number(values.warmup);
const PODS = Number(values.pods);
const PER_POD = Number(values['per-pod']);

const RPCS = ['ContainerStatus', 'PodSandboxStatus', 'ListContainers', 'ListPodSandbox', 'ImageStatus', 'ListImages', 'ContainerStats', 'Version'] as const;
type Rpc = (typeof RPCS)[number];
/** The RPCs to time (`--rpcs`, e.g. one at a time under a profiler), in the table's order. */
const TIMED: readonly Rpc[] = values.rpcs ? RPCS.filter((rpc) => values.rpcs!.split(',').includes(rpc)) : RPCS;

interface Runtime {
  name: 'stove' | 'containerd';
  clients: CriClients;
  pid: number;
  times: Record<Rpc, number[]>;
  /** Daemon CPU milliseconds spent over the timed calls of each RPC. */
  cpu: Partial<Record<Rpc, number>>;
  pods: { id: string; parent: string }[];
  containers: string[];
}

const bench = new PodBench();

async function populate(rt: Runtime, image: string): Promise<void> {
  const r = rt.clients.runtime;
  const layout = await detectCgroups();
  for (let p = 0; p < PODS; p++) {
    const config = bench.podConfig(rt.name, `r${p}`);
    await createCgroup(layout, config.linux!.cgroupParent);
    const { podSandboxId } = await r.runPodSandbox({ config, runtimeHandler: '' });
    rt.pods.push({ id: podSandboxId, parent: config.linux!.cgroupParent });
    for (let c = 0; c < PER_POD; c++) {
      const { containerId } = await r.createContainer({ podSandboxId, config: sleepContainerConfig(image, `app${c}`), sandboxConfig: config });
      await r.startContainer({ containerId });
      rt.containers.push(containerId);
    }
  }
}

/** The call for each RPC; `i` picks the object, so the calls spread over every pod and container. */
function call(rt: Runtime, rpc: Rpc, i: number, image: string): Promise<unknown> {
  const r = rt.clients.runtime;
  const containerId = rt.containers[i % rt.containers.length]!;
  const podSandboxId = rt.pods[i % rt.pods.length]!.id;
  switch (rpc) {
    case 'ContainerStatus':
      return r.containerStatus({ containerId, verbose: false });
    case 'PodSandboxStatus':
      return r.podSandboxStatus({ podSandboxId, verbose: false });
    case 'ListContainers':
      return r.listContainers({ filter: undefined });
    case 'ListPodSandbox':
      return r.listPodSandbox({ filter: undefined });
    case 'ImageStatus':
      return rt.clients.image.imageStatus(ImageStatusRequest.fromPartial({ image: { image } }));
    case 'ListImages':
      return rt.clients.image.listImages({ filter: undefined });
    case 'ContainerStats':
      return r.containerStats({ containerId });
    case 'Version':
      return r.version({ version: 'v1' });
  }
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root (network namespaces, mounts, cgroups)');
  const runtimes: Runtime[] = [];
  try {
    const registry = await bench.startRegistry();
    const image = (await pushBusyboxImage(registry, 'bench/sleep:1', { cmd: ['sleep', '3600'] })).reference;
    const empty = () => Object.fromEntries(RPCS.map((k) => [k, [] as number[]])) as Runtime['times'];
    if (values.only !== 'containerd') {
      const stove = await bench.startStove();
      runtimes.push({ name: 'stove', clients: stove.clients, pid: stove.child.pid!, times: empty(), cpu: {}, pods: [], containers: [] });
    }
    if (values.only !== 'stove') {
      const containerd = await bench.startContainerd();
      runtimes.push({ name: 'containerd', clients: containerd.clients, pid: containerd.pid, times: empty(), cpu: {}, pods: [], containers: [] });
    }
    for (const rt of runtimes) {
      await rt.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image } }));
      await populate(rt, image);
    }
    for (const rpc of TIMED) {
      // Warm-up: connections, caches and JIT of both runtimes, and the garbage of populating them; the
      // kubelet polls for ever, so what counts is the steady state.
      for (const rt of runtimes) for (let i = 0; i < WARMUP; i++) await call(rt, rpc, i, image);
      const cpuBefore = await Promise.all(runtimes.map((rt) => cpuMsOf(rt.pid)));
      for (let i = 0; i < CALLS; i++) {
        for (const rt of i % 2 === 0 ? runtimes : [...runtimes].reverse()) {
          const t = performance.now();
          await call(rt, rpc, i, image);
          rt.times[rpc].push(performance.now() - t);
        }
      }
      for (const [n, rt] of runtimes.entries()) rt.cpu[rpc] = (await cpuMsOf(rt.pid)) - cpuBefore[n]!;
      process.stderr.write(`  ${rpc} done\n`);
    }
    const times = (name: Runtime['name']) => runtimes.find((r) => r.name === name)?.times;
    process.stdout.write(
      heading('Read-path benchmark', `${CALLS} sequential calls per RPC after ${WARMUP} warm-up; ${PODS} pods × ${PER_POD} running containers`) +
        `${table(comparisonRows('RPC', TIMED, times('containerd'), times('stove')))}\n`,
    );
    const perCall = (name: Runtime['name'], rpc: Rpc) => runtimes.find((r) => r.name === name)?.cpu[rpc];
    const cpuRows = [['daemon CPU per call', 'containerd', 'stove', 'stove/containerd']];
    for (const rpc of TIMED) {
      const [c, s] = [perCall('containerd', rpc), perCall('stove', rpc)];
      const cell = (v: number | undefined) => (v === undefined ? '-' : `${((v / CALLS) * 1000).toFixed(0)} µs`);
      cpuRows.push([rpc, cell(c), cell(s), c && s ? `${(s / c).toFixed(2)}×` : '-']);
    }
    process.stdout.write(`\n${table(cpuRows)}\n`);
  } finally {
    const layout = await detectCgroups();
    for (const rt of runtimes) {
      for (const pod of rt.pods) {
        await rt.clients.runtime.stopPodSandbox({ podSandboxId: pod.id }).catch(() => {});
        await rt.clients.runtime.removePodSandbox({ podSandboxId: pod.id }).catch(() => {});
        await removeCgroup(layout, pod.parent).catch(() => {});
      }
    }
    await bench.cleanup();
  }
}

runBench(main, () => bench.cleanup());
