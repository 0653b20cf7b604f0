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
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { randomBytes } from 'node:crypto';
import { PodSandboxConfig } from '../src/gen/runtime/v1/api.js';
import { createCgroup, detectCgroups, removeCgroup } from '../src/platform/cgroups.js';
import { startRegistry, type TestRegistry } from '../test/helpers/registry.js';
import { pushImage } from '../test/helpers/image-builder.js';
import { REPO_ROOT, startStove, type StoveProcess } from '../test/helpers/stove-process.js';
import type { CriClients } from '../test/helpers/cri-client.js';
import { TestNet } from '../test/integration/network/host-net.js';
import { CONTAINERD_BIN } from './lib/containerd.js';
import { startPodContainerd, type PodContainerd } from './lib/containerd-pods.js';
import { median, ms, table } from './lib/stats.js';

const { values } = parseArgs({
  options: {
    cycles: { type: 'string', default: '30' },
    warmup: { type: 'string', default: '3' },
    only: { type: 'string' },
  },
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

function p90(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(s.length * 0.9) - 1)]!;
}

const tag = randomBytes(3).toString('hex');
const CGROUP_ROOT = `/stove-bench-${tag}`;

/** A pod as a kubelet describes it (no port mappings; DNS config, labels, log dir, pod cgroup). */
function podConfig(rt: string, i: number): PodSandboxConfig {
  const uid = `${rt}-${tag}-${i}`;
  return PodSandboxConfig.fromPartial({
    metadata: { name: `bench-${i}`, namespace: 'bench', uid, attempt: 0 },
    hostname: `bench-${i}`,
    logDirectory: `/tmp/stove-bench-logs-${tag}/${uid}`,
    dnsConfig: { servers: ['10.96.0.10'], searches: ['bench.svc.cluster.local', 'svc.cluster.local'], options: ['ndots:5'] },
    labels: { app: 'bench', 'io.kubernetes.pod.uid': uid },
    annotations: { 'kubernetes.io/config.source': 'api' },
    linux: { cgroupParent: `${CGROUP_ROOT}/pod${uid}`, securityContext: { namespaceOptions: {} } },
  });
}

async function timed<T>(rt: Runtime, rpc: Rpc, body: () => Promise<T>, record: boolean): Promise<T> {
  const started = performance.now();
  const result = await body();
  if (record) rt.times[rpc].push(performance.now() - started);
  return result;
}

async function cycle(rt: Runtime, i: number, record: boolean): Promise<void> {
  const config = podConfig(rt.name, i);
  const layout = await detectCgroups();
  await createCgroup(layout, config.linux!.cgroupParent);
  try {
    const { podSandboxId } = await timed(rt, 'RunPodSandbox', () => rt.clients.runtime.runPodSandbox({ config, runtimeHandler: '' }), record);
    await timed(rt, 'StopPodSandbox', () => rt.clients.runtime.stopPodSandbox({ podSandboxId }), record);
    await timed(rt, 'RemovePodSandbox', () => rt.clients.runtime.removePodSandbox({ podSandboxId }), record);
  } finally {
    await removeCgroup(layout, config.linux!.cgroupParent);
  }
}

/** Median per step of a Stove RPC, from its log lines (`pod sandbox ready`, `pod sandbox stopped`). */
function stoveSteps(output: string, message: string): string[][] {
  const steps = new Map<string, number[]>();
  for (const line of output.split('\n')) {
    if (!line.includes(`"msg":"${message}"`)) continue;
    const entry = JSON.parse(line) as { ms: number; steps: Record<string, number> };
    for (const [k, v] of Object.entries({ ...entry.steps, total: entry.ms })) steps.set(k, [...(steps.get(k) ?? []), v]);
  }
  return [...steps].map(([k, v]) => [k, ms(median(v))]);
}

async function pushPauseImage(registry: TestRegistry): Promise<string> {
  const pause = readFileSync(join(REPO_ROOT, 'rootfs/pause/bin/pause'));
  const image = await pushImage(registry, 'stove/pause:bench', {
    layers: [[{ type: 'dir', path: 'bin' }, { path: 'bin/pause', content: pause, mode: 0o755 }]],
    entrypoint: ['/bin/pause'],
  });
  return image.reference;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root (network namespaces, mounts, cgroups)');
  let registry: TestRegistry | undefined;
  let stove: StoveProcess | undefined;
  let containerd: PodContainerd | undefined;
  const nets: TestNet[] = [];
  try {
    const runtimes: Runtime[] = [];
    const empty = () => ({ RunPodSandbox: [], StopPodSandbox: [], RemovePodSandbox: [] });
    if (values.only !== 'containerd') {
      const net = await TestNet.create();
      nets.push(net);
      await net.writeConf();
      stove = await startStove({
        configToml: `[network]\ncni_conf_dir = "${net.confDir}"\ncni_bin_dirs = ["/usr/lib/cni"]\n`,
        extraArgs: ['--log-level', 'info'],
      });
      runtimes.push({ name: 'stove', clients: stove.clients, times: empty() });
    }
    if (values.only !== 'stove') {
      registry = await startRegistry();
      const sandboxImage = await pushPauseImage(registry);
      const net = await TestNet.create();
      nets.push(net);
      await net.writeConf();
      containerd = await startPodContainerd({ sandboxImage, cniConfDir: net.confDir, cniBinDir: '/usr/lib/cni' });
      runtimes.push({ name: 'containerd', clients: containerd.clients, times: empty() });
    }
    for (let i = 0; i < WARMUP; i++) for (const rt of runtimes) await cycle(rt, -1 - i, false);
    for (let i = 0; i < CYCLES; i++) {
      // Alternate who goes first so neither always follows the other's teardown.
      for (const rt of i % 2 === 0 ? runtimes : [...runtimes].reverse()) await cycle(rt, i, true);
      if ((i + 1) % 10 === 0) process.stderr.write(`  ${i + 1}/${CYCLES} cycles\n`);
    }

    const s = runtimes.find((r) => r.name === 'stove');
    const c = runtimes.find((r) => r.name === 'containerd');
    const rows = [['RPC', 'containerd median', 'containerd p90', 'stove median', 'stove p90', 'stove/containerd']];
    for (const rpc of RPCS) {
      const cell = (rt: Runtime | undefined, f: (v: number[]) => number) => (rt ? ms(f(rt.times[rpc])) : '-');
      const ratio = s && c ? `${(median(s.times[rpc]) / median(c.times[rpc])).toFixed(2)}×` : '-';
      rows.push([rpc, cell(c, median), cell(c, p90), cell(s, median), cell(s, p90), ratio]);
    }
    const containerdVersion = execFileSync(CONTAINERD_BIN, ['--version'], { encoding: 'utf8' }).trim().split(' ').slice(0, 3).join(' ');
    process.stdout.write(
      `\nPod sandbox benchmark (${new Date().toISOString().slice(0, 10)}; ${cpus().length} × ${cpus()[0]?.model.trim()}; ` +
        `${containerdVersion}; ${CYCLES} cycles after ${WARMUP} warm-up, bridge + host-local + portmap)\n\n${table(rows)}\n`,
    );
    if (stove) {
      const run = stoveSteps(stove.output(), 'pod sandbox ready');
      const stop = stoveSteps(stove.output(), 'pod sandbox stopped');
      const rows = [['RunPodSandbox step', 'median', 'StopPodSandbox step', 'median']];
      for (let i = 0; i < Math.max(run.length, stop.length); i++) rows.push([...(run[i] ?? ['', '']), ...(stop[i] ?? ['', ''])]);
      process.stdout.write(`\nWhere Stove's time goes (medians of its per-step log; some steps run at the same time):\n\n${table(rows)}\n`);
    }
  } finally {
    if (stove) {
      const pods = await stove.clients.runtime.listPodSandbox({ filter: undefined }).catch(() => ({ items: [] }));
      for (const pod of pods.items) await stove.clients.runtime.removePodSandbox({ podSandboxId: pod.id }).catch(() => {});
      await stove.stop().catch(() => {});
      await stove.cleanup().catch(() => {});
    }
    await containerd?.stop().catch(() => {});
    await registry?.stop().catch(() => {});
    for (const net of nets) await net.cleanup().catch(() => {});
    execFileSync('rm', ['-rf', `/tmp/stove-bench-logs-${tag}`]);
    const layout = await detectCgroups();
    await removeCgroup(layout, CGROUP_ROOT).catch(() => {});
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
