/**
 * Pod sandbox benchmark: RunPodSandbox → StopPodSandbox → RemovePodSandbox cycles through the CRI,
 * with Stove and with containerd (Debian's 1.6 with its CRI plugin) in one run. Both use the Debian
 * CNI plugins with the same conflist (bridge + host-local + portmap; each runtime its own bridge and
 * range), the same pod configs and pre-created pod cgroups (as a kubelet makes them). containerd's
 * pause image is Stove's rootfs/pause pushed to a loopback registry; warm-up cycles pull it first.
 *
 *   node dist/bench/sandbox.js [--cycles 30] [--warmup 3] [--only stove|containerd]
 *
 * Prints medians and p90 per RPC, the Stove/containerd ratio, and where Stove's RunPodSandbox time
 * goes (its per-step log). Starts and stops everything it uses and removes it afterwards.
 */
import { PodSandboxConfig } from '../src/gen/runtime/v1/api.js';
import { createCgroup, detectCgroups, removeCgroup } from '../src/platform/cgroups.js';
import type { CriClients } from '../test/helpers/cri-client.js';
import { PodBench, runCycles, stoveStepMedians, timed } from './lib/pods.js';
import { benchOptions, heading, runBench } from './lib/run.js';
import { comparisonRows, table } from './lib/stats.js';

const values = benchOptions('node dist/bench/sandbox.js [--cycles 30] [--warmup 3] [--only stove|containerd]', {
  cycles: { type: 'string', default: '30' },
  warmup: { type: 'string', default: '3' },
  only: { type: 'string' },
});
const CYCLES = Number(values.cycles);
const WARMUP = Number(values.warmup);
const RPCS = ['RunPodSandbox', 'StopPodSandbox', 'RemovePodSandbox'] as const;
type Rpc = (typeof RPCS)[number];

interface Runtime {
  name: 'stove' | 'containerd';
  clients: CriClients;
  times: Record<Rpc, number[]>;
}

const bench = new PodBench();

/** A pod as a kubelet describes it (no port mappings; DNS config, labels, log dir, pod cgroup). */
function podConfig(rt: string, i: number): PodSandboxConfig {
  return bench.podConfig(rt, i, {
    dnsConfig: { servers: ['10.96.0.10'], searches: ['bench.svc.cluster.local', 'svc.cluster.local'], options: ['ndots:5'] },
    annotations: { 'kubernetes.io/config.source': 'api' },
  });
}

async function cycle(rt: Runtime, i: number, record: boolean): Promise<void> {
  const config = podConfig(rt.name, i);
  const layout = await detectCgroups();
  await createCgroup(layout, config.linux!.cgroupParent);
  try {
    const { podSandboxId } = await timed(rt.times, 'RunPodSandbox', () => rt.clients.runtime.runPodSandbox({ config, runtimeHandler: '' }), record);
    await timed(rt.times, 'StopPodSandbox', () => rt.clients.runtime.stopPodSandbox({ podSandboxId }), record);
    await timed(rt.times, 'RemovePodSandbox', () => rt.clients.runtime.removePodSandbox({ podSandboxId }), record);
  } finally {
    await removeCgroup(layout, config.linux!.cgroupParent);
  }
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root (network namespaces, mounts, cgroups)');
  try {
    const runtimes: Runtime[] = [];
    const empty = () => ({ RunPodSandbox: [], StopPodSandbox: [], RemovePodSandbox: [] });
    if (values.only !== 'containerd') runtimes.push({ name: 'stove', clients: (await bench.startStove()).clients, times: empty() });
    if (values.only !== 'stove') runtimes.push({ name: 'containerd', clients: (await bench.startContainerd()).clients, times: empty() });
    await runCycles(runtimes, WARMUP, CYCLES, cycle);

    const times = (name: Runtime['name']) => runtimes.find((r) => r.name === name)?.times;
    process.stdout.write(
      heading('Pod sandbox benchmark', `${CYCLES} cycles after ${WARMUP} warm-up, bridge + host-local + portmap`) +
        `${table(comparisonRows('RPC', RPCS, times('containerd'), times('stove')))}\n`,
    );
    const stove = bench.stove;
    if (stove) {
      const run = stoveStepMedians(stove.output(), 'pod sandbox ready');
      const stop = stoveStepMedians(stove.output(), 'pod sandbox stopped');
      const rows = [['RunPodSandbox step', 'median', 'StopPodSandbox step', 'median']];
      for (let i = 0; i < Math.max(run.length, stop.length); i++) rows.push([...(run[i] ?? ['', '']), ...(stop[i] ?? ['', ''])]);
      process.stdout.write(`\nWhere Stove's time goes (medians of its per-step log; some steps run at the same time):\n\n${table(rows)}\n`);
    }
  } finally {
    await bench.cleanup();
  }
}

runBench(main, () => bench.cleanup());
