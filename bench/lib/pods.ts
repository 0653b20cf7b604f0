/**
 * What the pod benchmarks (sandbox.ts, containers.ts) share: Stove and containerd each on a CNI bridge
 * and range of its own with the same conflist (Debian's bridge + host-local + portmap), containerd's
 * pause image (Stove's rootfs/pause) in a loopback registry, pod configs as a kubelet makes them with
 * their cgroups under one root, timed cycles, and the removal of all of it.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PodSandboxConfig, type DeepPartial } from '../../src/gen/runtime/v1/api.js';
import { detectCgroups, removeCgroup } from '../../src/platform/cgroups.js';
import { startRegistry, type TestRegistry } from '../../test/helpers/registry.js';
import { pushImage } from '../../test/helpers/image-builder.js';
import { REPO_ROOT, startStove, type StoveProcess } from '../../test/helpers/stove-process.js';
import { TestNet } from '../../test/integration/network/host-net.js';
import { startContainerd, type Containerd, type ContainerdOptions } from './containerd.js';
import { median, ms } from './stats.js';

export class PodBench {
  readonly tag = randomBytes(3).toString('hex');
  /** Every pod's cgroup parent is below this. */
  readonly cgroupRoot = `/stove-bench-${this.tag}`;
  readonly logs = `/tmp/stove-bench-logs-${this.tag}`;
  registry?: TestRegistry;
  stove?: StoveProcess;
  containerd?: Containerd;
  /** containerd's pause image, once startContainerd pushed it. */
  pauseImage?: string;
  private readonly nets: TestNet[] = [];
  private containerdNet?: TestNet;
  private transientNet?: TestNet;
  /** Transient daemons not yet stopped by their caller (an interrupted bench stops them here). */
  private readonly transients = new Set<StoveProcess>();
  private cleaning?: Promise<void>;

  async startRegistry(): Promise<TestRegistry> {
    this.registry ??= await startRegistry();
    return this.registry;
  }

  /**
   * Stove with `--log-level info` (its per-step timings; `debug` adds each RPC's handler time) on a
   * bridge of its own; `extraToml` adds tables, `env` variables to its environment.
   */
  async startStove(extraToml = '', logLevel: 'info' | 'debug' = 'info', env: Record<string, string> = {}): Promise<StoveProcess> {
    this.stove = await this.startStoveOn(await this.net(), extraToml, logLevel, env);
    return this.stove;
  }

  /**
   * A short-lived Stove as startStove makes it, on one bridge shared by all such daemons (one after
   * another: memory.ts measures fresh daemons); the caller stops it and removes its dir.
   */
  async startTransientStove(): Promise<StoveProcess> {
    this.transientNet ??= await this.net();
    const stove = await this.startStoveOn(this.transientNet, '', 'info');
    this.transients.add(stove);
    stove.child.once('exit', () => this.transients.delete(stove));
    return stove;
  }

  private startStoveOn(net: TestNet, extraToml: string, logLevel: string, env: Record<string, string> = {}): Promise<StoveProcess> {
    return startStove({
      env,
      // Another build's launcher, to compare builds against the same containerd (bench/README.md).
      bin: process.env.STOVE_BENCH_BIN || undefined,
      // NRI as it is by default, on a socket of each daemon's own (several run side by side).
      configToml: `[network]\ncni_conf_dir = "${net.confDir}"\ncni_bin_dirs = ["/usr/lib/cni"]\n${extraToml}${/^\[nri[\].]/m.test(extraToml) ? '' : `\n[nri]\nsocket_path = "${join(net.dir, 'nri.sock')}"\n`}`,
      extraArgs: ['--log-level', logLevel],
    });
  }

  /** Removes Stove's pods, stops it and removes its dir (its bridge stays until cleanup). */
  async stopStove(): Promise<void> {
    const stove = this.stove;
    if (!stove) return;
    this.stove = undefined;
    const pods = await stove.clients.runtime.listPodSandbox({ filter: undefined }).catch(() => ({ items: [] }));
    for (const pod of pods.items) await stove.clients.runtime.removePodSandbox({ podSandboxId: pod.id }).catch(() => {});
    await stove.stop().catch(() => {});
    await stove.cleanup().catch(() => {});
  }

  /** containerd with the pause image pushed to the registry (started if need be), on a bridge of its own; `options` add to that. */
  async startContainerd(options: ContainerdOptions = {}): Promise<Containerd> {
    const sandboxImage = await pushPauseImage(await this.startRegistry());
    this.pauseImage = sandboxImage;
    const net = await this.net();
    this.containerdNet = net;
    this.containerd = await startContainerd({ ...options, sandboxImage, cniConfDir: net.confDir, cniBinDir: '/usr/lib/cni' });
    return this.containerd;
  }

  /** A pod as a kubelet describes it (log dir, labels, pod cgroup), with `extra` fields. */
  podConfig(rt: string, i: number | string, extra: DeepPartial<PodSandboxConfig> = {}): PodSandboxConfig {
    const uid = `${rt}-${this.tag}-${i}`;
    return PodSandboxConfig.fromPartial({
      metadata: { name: `bench-${i}`, namespace: 'bench', uid, attempt: 0 },
      hostname: `bench-${i}`,
      logDirectory: `${this.logs}/${uid}`,
      labels: { app: 'bench', 'io.kubernetes.pod.uid': uid },
      linux: { cgroupParent: `${this.cgroupRoot}/pod${uid}`, securityContext: { namespaceOptions: {} } },
      ...extra,
    });
  }

  /**
   * Removes Stove's pods, stops everything, removes the bridges, logs and cgroups. Once: a signal's
   * cleanup and main's `finally` share it.
   */
  cleanup(): Promise<void> {
    this.cleaning ??= this.removeEverything();
    return this.cleaning;
  }

  private async removeEverything(): Promise<void> {
    for (const transient of this.transients) {
      await transient.stop().catch(() => {});
      await transient.cleanup().catch(() => {});
    }
    const stove = this.stove;
    if (stove) {
      const pods = await stove.clients.runtime.listPodSandbox({ filter: undefined }).catch(() => ({ items: [] }));
      for (const pod of pods.items) await stove.clients.runtime.removePodSandbox({ podSandboxId: pod.id }).catch(() => {});
      await stove.stop().catch(() => {});
      await stove.cleanup().catch(() => {});
    }
    await this.containerd?.stop().catch(() => {});
    await this.registry?.stop().catch(() => {});
    // What the safety net had to remove is what a runtime left behind: said, not hidden.
    for (const net of this.nets) {
      const leftovers = await net.cleanup().catch((err: Error) => [`cleanup failed: ${err.message}`]);
      if (leftovers.length) process.stderr.write(`bench: left behind on ${net === this.containerdNet ? "containerd's" : "Stove's"} network ${net.name}: ${leftovers.join(', ')}\n`);
    }
    execFileSync('rm', ['-rf', this.logs]);
    await removeCgroup(await detectCgroups(), this.cgroupRoot).catch(() => {});
  }

  private async net(): Promise<TestNet> {
    const net = await TestNet.create();
    this.nets.push(net);
    await net.writeConf();
    return net;
  }
}

async function pushPauseImage(registry: TestRegistry): Promise<string> {
  const pause = readFileSync(join(REPO_ROOT, 'rootfs/pause/bin/pause'));
  const image = await pushImage(registry, 'stove/pause:bench', {
    layers: [[{ type: 'dir', path: 'bin' }, { path: 'bin/pause', content: pause, mode: 0o755 }]],
    entrypoint: ['/bin/pause'],
  });
  return image.reference;
}

/** Runs `body`, adding its time to `times[key]` when `record` is set. */
export async function timed<K extends string, T>(times: Record<K, number[]>, key: K, body: () => Promise<T>, record: boolean): Promise<T> {
  const started = performance.now();
  const result = await body();
  if (record) times[key].push(performance.now() - started);
  return result;
}

/**
 * `warmup` untimed cycles per runtime, then `cycles` timed ones; runtimes alternate who goes first so
 * neither always follows the other's teardown.
 */
export async function runCycles<R>(runtimes: R[], warmup: number, cycles: number, cycle: (rt: R, i: number, record: boolean) => Promise<void>): Promise<void> {
  for (let i = 0; i < warmup; i++) for (const rt of runtimes) await cycle(rt, -1 - i, false);
  for (let i = 0; i < cycles; i++) {
    for (const rt of i % 2 === 0 ? runtimes : [...runtimes].reverse()) await cycle(rt, i, true);
    if ((i + 1) % 10 === 0) process.stderr.write(`  ${i + 1}/${cycles} cycles\n`);
  }
}

/** Median per step of a Stove RPC, from its log lines with that message (`pod sandbox ready`, `container created`). */
export function stoveStepMedians(output: string, message: string): string[][] {
  const steps = new Map<string, number[]>();
  for (const line of output.split('\n')) {
    if (!line.includes(`"msg":"${message}"`)) continue;
    const entry = JSON.parse(line) as { ms: number; steps: Record<string, number> };
    for (const [k, v] of Object.entries({ ...entry.steps, total: entry.ms })) steps.set(k, [...(steps.get(k) ?? []), v]);
  }
  return [...steps].map(([k, v]) => [k, ms(median(v))]);
}
