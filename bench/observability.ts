/**
 * What metrics and tracing cost: pod + container start on a Stove with both off and on a Stove with
 * both on (tracing to an OTLP/HTTP receiver in this process, `/metrics` scraped every second as a
 * Prometheus would), alternating which goes first; then the scrape time with 100 running containers,
 * and each daemon's RSS when idle.
 *
 *   node dist/bench/observability.js [--cycles 30] [--warmup 3] [--pods 50] [--per-pod 2]
 *
 * Both daemons use the Debian CNI plugins (bridge + host-local + portmap, a bridge and range each),
 * the same busybox image from a loopback registry and pod cgroups made beforehand. Everything it starts
 * is stopped and removed afterwards.
 */
import { readFile } from 'node:fs/promises';
import { request } from 'undici';
import { ContainerConfig, PullImageRequest } from '../src/gen/runtime/v1/api.js';
import { createCgroup, detectCgroups, removeCgroup } from '../src/platform/cgroups.js';
import { pushBusyboxImage } from '../test/helpers/image-builder.js';
import { startOtlpReceiver, type OtlpReceiver } from '../test/helpers/otlp-receiver.js';
import { metricsAddressOf } from '../test/helpers/prometheus.js';
import type { StoveProcess } from '../test/helpers/stove-process.js';
import { PodBench, runCycles, timed } from './lib/pods.js';
import { cpuMsOf } from './lib/processes.js';
import { benchOptions, heading, runBench } from './lib/run.js';
import { median, ms, p90, table } from './lib/stats.js';

const values = benchOptions('node dist/bench/observability.js [--cycles 30] [--warmup 3] [--pods 50] [--per-pod 2] [--scrape-ms 1000] [--aa]', {
  'scrape-ms': { type: 'string', default: '1000' },
  aa: { type: 'boolean', default: false },
  cycles: { type: 'string', default: '30' },
  warmup: { type: 'string', default: '3' },
  pods: { type: 'string', default: '50' },
  'per-pod': { type: 'string', default: '2' },
});
const CYCLES = Number(values.cycles);
const WARMUP = Number(values.warmup);
const PODS = Number(values.pods);
const PER_POD = Number(values['per-pod']);
/** How often /metrics is scraped while pods start (0: never, to see the hooks' cost alone). */
const SCRAPE_MS = Number(values['scrape-ms']);
/** Both daemons with everything off: the noise floor of the comparison on this machine. */
const AA = values.aa === true;

const STEPS = ['start total', 'RunPodSandbox', 'CreateContainer', 'StartContainer'] as const;
type Step = (typeof STEPS)[number];

interface Daemon {
  name: 'off' | 'on';
  bench: PodBench;
  stove: StoveProcess;
  times: Record<Step, number[]>;
  idleRssKiB: number;
  /** The daemon's own CPU time (user + system, ms) during the timed cycles, and their count. */
  cpuMs: number;
  starts: number;
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
    if (record) {
      d.times['start total'].push(performance.now() - t);
      d.cpuMs += (await cpuMsOf(d.stove.child.pid!)) - cpuBefore;
      d.starts++;
    }
    await r.stopPodSandbox({ podSandboxId });
    await r.removePodSandbox({ podSandboxId });
  } finally {
    await removeCgroup(layout, config.linux!.cgroupParent).catch(() => {});
  }
}

async function rssKiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? 0);
}

/** The daemon's RSS once it has been idle for 3 s after start. */
async function idleRss(stove: StoveProcess): Promise<number> {
  await new Promise((r) => setTimeout(r, 3000));
  return rssKiB(stove.child.pid!);
}

async function scrape(address: string): Promise<{ ms: number; bytes: number }> {
  const t = performance.now();
  const res = await request(`http://${address}/metrics`);
  const body = await res.body.text();
  return { ms: performance.now() - t, bytes: body.length };
}

/** Runs PODS × PER_POD containers on `d`, times scrapes, and removes them. */
async function scrapeWithContainers(
  d: Daemon,
  image: string,
  address: string,
): Promise<{ idle: number[]; loaded: number[]; containers: number; bytes: number; cpuMsPerScrape: number }> {
  const idle: number[] = [];
  for (let i = 0; i < 30; i++) idle.push((await scrape(address)).ms);
  const r = d.stove.clients.runtime;
  const layout = await detectCgroups();
  const pods: { id: string; parent: string }[] = [];
  try {
    for (let p = 0; p < PODS; p++) {
      const config = d.bench.podConfig(d.name, `s${p}`);
      await createCgroup(layout, config.linux!.cgroupParent);
      const { podSandboxId } = await r.runPodSandbox({ config, runtimeHandler: '' });
      pods.push({ id: podSandboxId, parent: config.linux!.cgroupParent });
      for (let c = 0; c < PER_POD; c++) {
        const { containerId } = await r.createContainer({ podSandboxId, config: containerConfig(image, `app${c}`), sandboxConfig: config });
        await r.startContainer({ containerId });
      }
      if ((p + 1) % 10 === 0) process.stderr.write(`  ${p + 1}/${PODS} pods running\n`);
    }
    const containers = (await r.listContainers({ filter: undefined })).containers.length;
    const loaded: number[] = [];
    let bytes = 0;
    const cpuBefore = await cpuMsOf(d.stove.child.pid!);
    for (let i = 0; i < 50; i++) {
      const s = await scrape(address);
      loaded.push(s.ms);
      bytes = s.bytes;
    }
    const cpuMsPerScrape = ((await cpuMsOf(d.stove.child.pid!)) - cpuBefore) / 50;
    return { idle, loaded, containers, bytes, cpuMsPerScrape };
  } finally {
    for (const pod of pods) {
      await r.stopPodSandbox({ podSandboxId: pod.id }).catch(() => {});
      await r.removePodSandbox({ podSandboxId: pod.id }).catch(() => {});
      await removeCgroup(layout, pod.parent).catch(() => {});
    }
  }
}

/** What the "on" daemon had, for the report's heading. */
function runDescription(): string {
  if (AA) return 'A/A: both daemons with metrics and tracing off (the noise floor)';
  const scraping = SCRAPE_MS > 0 ? `metrics scraped every ${SCRAPE_MS} ms` : 'metrics on, never scraped';
  return `${scraping}, every span exported (sample_ratio 1) vs both off`;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root (network namespaces, mounts, cgroups)');
  const off = new PodBench();
  const on = new PodBench();
  let receiver: OtlpReceiver | undefined;
  let scraper: NodeJS.Timeout | undefined;
  try {
    const registry = await off.startRegistry();
    on.registry = registry;
    const image = (await pushBusyboxImage(registry, 'bench/sleep:1', { cmd: ['sleep', '3600'] })).reference;
    receiver = await startOtlpReceiver();
    const empty = () => Object.fromEntries(STEPS.map((k) => [k, [] as number[]])) as Record<Step, number[]>;
    const offStove = await off.startStove();
    const onStove = await on.startStove(AA ? '' : `[metrics]\naddress = "127.0.0.1:0"\n[tracing]\nendpoint = "${receiver.url}"\n`);
    const daemons: Daemon[] = [
      { name: 'off', bench: off, stove: offStove, times: empty(), idleRssKiB: 0, cpuMs: 0, starts: 0 },
      { name: 'on', bench: on, stove: onStove, times: empty(), idleRssKiB: 0, cpuMs: 0, starts: 0 },
    ];
    for (const d of daemons) d.idleRssKiB = await idleRss(d.stove);
    const address = AA ? '' : metricsAddressOf(onStove.output());
    // As a Prometheus would: a scrape every second while pods start.
    if (SCRAPE_MS > 0 && !AA) scraper = setInterval(() => void scrape(address).catch(() => {}), SCRAPE_MS);
    for (const d of daemons) await d.stove.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image } }));
    await runCycles(daemons, WARMUP, CYCLES, (d, i, record) => cycle(d, image, i, record));
    clearInterval(scraper);
    scraper = undefined;
    const spans = receiver.spans.length;
    const scrapes = PODS > 0 && !AA ? await scrapeWithContainers(daemons[1]!, image, address) : undefined;

    const [a, b] = daemons as [Daemon, Daemon];
    const rows = [['step', 'off median', 'off p90', 'on median', 'on p90', 'on/off (medians)']];
    for (const step of STEPS) {
      const change = (median(b.times[step]) / median(a.times[step]) - 1) * 100;
      const label = step === 'start total' ? '**pod + container start**' : step;
      rows.push([label, ms(median(a.times[step])), ms(p90(a.times[step])), ms(median(b.times[step])), ms(p90(b.times[step])), `${change >= 0 ? '+' : ''}${change.toFixed(1)}%`]);
    }
    const cpuOff = a.cpuMs / a.starts;
    const cpuOn = b.cpuMs / b.starts;
    const cpuChange = (cpuOn / cpuOff - 1) * 100;
    rows.push(['daemon CPU per pod + container start (mean)', ms(cpuOff), '-', ms(cpuOn), '-', `${cpuChange >= 0 ? '+' : ''}${cpuChange.toFixed(1)}%`]);
    process.stdout.write(
      heading('Observability overhead', `${CYCLES} cycles after ${WARMUP} warm-up; ${runDescription()}`) +
        `${table(rows)}\n\n${spans} spans received.\n`,
    );
    const mib = (kib: number) => `${(kib / 1024).toFixed(1)} MiB`;
    const rows2 = [['', 'both off', 'both on'], ['daemon RSS idle (3 s after start)', mib(a.idleRssKiB), mib(b.idleRssKiB)]];
    if (scrapes) {
      rows2.push(['scrape of /metrics, idle (median / p90)', '-', `${ms(median(scrapes.idle))} / ${ms(p90(scrapes.idle))}`]);
      rows2.push([`scrape with ${scrapes.containers} running containers (median / p90)`, '-', `${ms(median(scrapes.loaded))} / ${ms(p90(scrapes.loaded))}`]);
      rows2.push(['daemon CPU per scrape with them', '-', ms(scrapes.cpuMsPerScrape)]);
      rows2.push(['exposition size', '-', `${(scrapes.bytes / 1024).toFixed(1)} KiB`]);
    }
    process.stdout.write(`\n${table(rows2)}\n`);
  } finally {
    if (scraper) clearInterval(scraper);
    await on.cleanup();
    await off.cleanup();
    await receiver?.stop();
  }
}

runBench(main);
