/**
 * What NRI costs with no plugin: pod + container start and teardown on a Stove with NRI off, one with
 * NRI on and no plugin (a socket nobody connects to), and one with NRI on and the built-in default
 * validator enabled (every rule on, no required plugin), alternating which goes first; each daemon's
 * own CPU time per cycle and its RSS when idle.
 *
 *   node dist/bench/nri.js [--cycles 30] [--warmup 3] [--aa]
 *
 * `--aa` runs three daemons with NRI off (the noise floor on this machine). The daemons use the Debian
 * CNI plugins (a bridge and range each), the same busybox image from a loopback registry and pod
 * cgroups made beforehand. Everything it starts is stopped and removed afterwards.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ContainerConfig, PullImageRequest } from '../src/gen/runtime/v1/api.js';
import { createCgroup, detectCgroups, removeCgroup } from '../src/platform/cgroups.js';
import { pushBusyboxImage } from '../test/helpers/image-builder.js';
import type { StoveProcess } from '../test/helpers/stove-process.js';
import { PodBench, runCycles, timed } from './lib/pods.js';
import { cpuMsOf } from './lib/processes.js';
import { benchOptions, heading, runBench } from './lib/run.js';
import { median, ms, p90, table } from './lib/stats.js';

const values = benchOptions('node dist/bench/nri.js [--cycles 30] [--warmup 3] [--aa]', {
  cycles: { type: 'string', default: '30' },
  warmup: { type: 'string', default: '3' },
  aa: { type: 'boolean', default: false },
});
const CYCLES = Number(values.cycles);
const WARMUP = Number(values.warmup);
const AA = values.aa === true;

const OFF = '[nri]\nenable = false\n';
const STEPS = ['start total', 'RunPodSandbox', 'CreateContainer', 'StartContainer', 'teardown total'] as const;
type Step = (typeof STEPS)[number];

interface Daemon {
  name: string;
  bench: PodBench;
  stove: StoveProcess;
  times: Record<Step, number[]>;
  idleRssKiB: number;
  cpuMs: number;
  cycles: number;
}

function containerConfig(image: string, name: string): ContainerConfig {
  return ContainerConfig.fromPartial({
    metadata: { name, attempt: 0 },
    image: { image },
    command: ['sleep', '3600'],
    logPath: `${name}/0.log`,
    linux: { resources: { cpuShares: 2n, memoryLimitInBytes: 64n << 20n }, securityContext: { namespaceOptions: {} } },
  });
}

async function cycle(d: Daemon, image: string, i: number, record: boolean): Promise<void> {
  const config = d.bench.podConfig(d.name, i);
  const layout = await detectCgroups();
  await createCgroup(layout, config.linux!.cgroupParent);
  const r = d.stove.clients.runtime;
  const cpuBefore = record ? await cpuMsOf(d.stove.child.pid!) : 0;
  try {
    const t = performance.now();
    const { podSandboxId } = await timed(d.times, 'RunPodSandbox', () => r.runPodSandbox({ config, runtimeHandler: '' }), record);
    const { containerId } = await timed(d.times, 'CreateContainer', () => r.createContainer({ podSandboxId, config: containerConfig(image, 'app'), sandboxConfig: config }), record);
    await timed(d.times, 'StartContainer', () => r.startContainer({ containerId }), record);
    if (record) d.times['start total'].push(performance.now() - t);
    await timed(
      d.times,
      'teardown total',
      async () => {
        await r.stopContainer({ containerId, timeout: 0n });
        await r.removeContainer({ containerId });
        await r.stopPodSandbox({ podSandboxId });
        await r.removePodSandbox({ podSandboxId });
      },
      record,
    );
    if (record) {
      d.cpuMs += (await cpuMsOf(d.stove.child.pid!)) - cpuBefore;
      d.cycles++;
    }
  } finally {
    await removeCgroup(layout, config.linux!.cgroupParent).catch(() => {});
  }
}

async function idleRss(stove: StoveProcess): Promise<number> {
  await new Promise((r) => setTimeout(r, 3000));
  const status = await readFile(`/proc/${stove.child.pid!}/status`, 'utf8');
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? 0);
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root (network namespaces, mounts, cgroups)');
  const dir = await mkdtemp(join(tmpdir(), 'stove-bench-nri-'));
  const configs: [string, string][] = AA
    ? [
        ['off', OFF],
        ['off (2)', OFF],
        ['off (3)', OFF],
      ]
    : [
        ['off', OFF],
        ['on, no plugin', `[nri]\nenable = true\nsocket_path = "${join(dir, 'a.sock')}"\nplugin_path = "${join(dir, 'none')}"\n`],
        [
          'on + default validator',
          `[nri]\nenable = true\nsocket_path = "${join(dir, 'b.sock')}"\nplugin_path = "${join(dir, 'none')}"\n[nri.default_validator]\nenable = true\n` +
            'reject_oci_hook_adjustment = true\nreject_runtime_default_seccomp_adjustment = true\nreject_unconfined_seccomp_adjustment = true\n' +
            'reject_custom_seccomp_adjustment = true\nreject_namespace_adjustment = true\nreject_sysctl_adjustment = true\n',
        ],
      ];
  const benches = configs.map(() => new PodBench());
  try {
    const registry = await benches[0]!.startRegistry();
    for (const b of benches) b.registry = registry;
    const image = (await pushBusyboxImage(registry, 'bench/sleep:1', { cmd: ['sleep', '3600'] })).reference;
    const empty = () => Object.fromEntries(STEPS.map((k) => [k, [] as number[]])) as Record<Step, number[]>;
    const daemons: Daemon[] = [];
    for (const [i, [name, toml]] of configs.entries()) {
      const stove = await benches[i]!.startStove(toml);
      daemons.push({ name, bench: benches[i]!, stove, times: empty(), idleRssKiB: 0, cpuMs: 0, cycles: 0 });
    }
    for (const d of daemons) d.idleRssKiB = await idleRss(d.stove);
    for (const d of daemons) await d.stove.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image } }));
    await runCycles(daemons, WARMUP, CYCLES, (d, i, record) => cycle(d, image, i, record));

    const base = daemons[0]!;
    const rows = [['step', ...daemons.flatMap((d) => [`${d.name} median`, `${d.name} p90`])]];
    for (const step of STEPS) {
      const label = step.endsWith('total') ? `**${step === 'start total' ? 'pod + container start' : 'stop + remove both'}**` : step;
      rows.push([label, ...daemons.flatMap((d) => [ms(median(d.times[step])), ms(p90(d.times[step]))])]);
    }
    rows.push(['daemon CPU per cycle (mean)', ...daemons.flatMap((d) => [ms(d.cpuMs / d.cycles), '-'])]);
    rows.push(['daemon RSS idle (3 s after start)', ...daemons.flatMap((d) => [`${(d.idleRssKiB / 1024).toFixed(1)} MiB`, '-'])]);
    const change = daemons
      .slice(1)
      .map((d) => {
        const c = (median(d.times['start total']) / median(base.times['start total']) - 1) * 100;
        const cpu = (d.cpuMs / d.cycles / (base.cpuMs / base.cycles) - 1) * 100;
        return `${d.name}: start ${c >= 0 ? '+' : ''}${c.toFixed(1)}%, daemon CPU ${cpu >= 0 ? '+' : ''}${cpu.toFixed(1)}%`;
      })
      .join('; ');
    process.stdout.write(heading('NRI with no plugin', `${CYCLES} cycles after ${WARMUP} warm-up${AA ? ' (A/A: NRI off on all three)' : ''}`) + `${table(rows)}\n\nAgainst "${base.name}": ${change}.\n`);
  } finally {
    for (const b of benches.reverse()) await b.cleanup();
    await rm(dir, { recursive: true, force: true });
  }
}

runBench(main);
