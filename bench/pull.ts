/**
 * Pull benchmark: the same images from the same loopback registry, pulled through the CRI by Stove
 * and by containerd (Debian's, with its CRI plugin), cold (nothing cached) and warm (present).
 *
 *   node dist/bench/pull.js [--runs 3] [--warm-runs 10] [--big-mb 200] [--only big|small]
 *
 * Prints a Markdown table of medians and the Stove/containerd ratio. Starts and stops everything it
 * uses (registry, containerd, stove) in temp dirs and removes them afterwards.
 */
import { execFileSync } from 'node:child_process';
import { startRegistry, type TestRegistry } from '../test/helpers/registry.js';
import { startStove, type StoveProcess } from '../test/helpers/stove-process.js';
import type { CriClients } from '../test/helpers/cri-client.js';
import type { PushedImage } from '../test/helpers/image-builder.js';
import { PullImageRequest, RemoveImageRequest, ImageStatusRequest } from '../src/gen/runtime/v1/api.js';
import { startContainerd, type Containerd } from './lib/containerd.js';
import { pushBigImage, pushSmallFilesImage } from './lib/images.js';
import { benchOptions, heading, runBench } from './lib/run.js';
import { median, ms, table } from './lib/stats.js';

const values = benchOptions('node dist/bench/pull.js [--runs 3] [--warm-runs 10] [--big-mb 200] [--only big|small]', {
  runs: { type: 'string', default: '3' },
  'warm-runs': { type: 'string', default: '10' },
  'big-mb': { type: 'string', default: '200' },
  only: { type: 'string' },
});
const RUNS = Number(values.runs);
const WARM_RUNS = Number(values['warm-runs']);

interface Runtime {
  name: string;
  clients: CriClients;
}

async function removeImage(rt: Runtime, ref: string): Promise<void> {
  await rt.clients.image.removeImage(RemoveImageRequest.fromPartial({ image: { image: ref } }));
  const st = await rt.clients.image.imageStatus(ImageStatusRequest.fromPartial({ image: { image: ref } }));
  if (st.image) throw new Error(`${rt.name} still has ${ref} after RemoveImage`);
}

async function timedPull(rt: Runtime, ref: string): Promise<number> {
  const started = performance.now();
  await rt.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image: ref } }));
  return performance.now() - started;
}

async function bench(runtimes: Runtime[], image: PushedImage): Promise<Map<string, { cold: number[]; warm: number[] }>> {
  const results = new Map(runtimes.map((r) => [r.name, { cold: [] as number[], warm: [] as number[] }]));
  for (let run = 0; run < RUNS; run++) {
    // Alternate who goes first so neither always meets a warmer page cache.
    const order = run % 2 === 0 ? runtimes : [...runtimes].reverse();
    for (const rt of order) {
      await removeImage(rt, image.reference);
      execFileSync('sync');
      const t = await timedPull(rt, image.reference);
      results.get(rt.name)!.cold.push(t);
      process.stderr.write(`  ${rt.name} cold #${run + 1}: ${ms(t)}\n`);
    }
  }
  for (const rt of runtimes) {
    for (let run = 0; run < WARM_RUNS; run++) results.get(rt.name)!.warm.push(await timedPull(rt, image.reference));
    process.stderr.write(`  ${rt.name} warm median: ${ms(median(results.get(rt.name)!.warm))}\n`);
  }
  for (const rt of runtimes) await removeImage(rt, image.reference);
  return results;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root (stove and containerd mount overlays)');
  let registry: TestRegistry | undefined;
  let stove: StoveProcess | undefined;
  let containerd: Containerd | undefined;
  try {
    registry = await startRegistry();
    process.stderr.write('building and pushing images…\n');
    const images: { label: string; image: PushedImage }[] = [];
    if (values.only !== 'small')
      images.push({ label: `${values['big-mb']} MB, 4 incompressible layers`, image: await pushBigImage(registry, 'bench/big:1', Number(values['big-mb'])) });
    if (values.only !== 'big') images.push({ label: '30 layers of small files', image: await pushSmallFilesImage(registry, 'bench/small:1') });

    stove = await startStove({ configToml: '[images]\nmax_concurrent_downloads = 3\n', extraArgs: ['--log-level', 'info'] });
    containerd = await startContainerd({ registries: [registry.host], maxConcurrentDownloads: 3 });
    const runtimes: Runtime[] = [
      { name: 'containerd', clients: containerd.clients },
      { name: 'stove', clients: stove.clients },
    ];
    const rows = [['image', 'containerd cold', 'stove cold', 'stove/containerd', 'containerd warm', 'stove warm']];
    for (const { label, image } of images) {
      process.stderr.write(`${label} (${image.reference})\n`);
      const r = await bench(runtimes, image);
      const c = r.get('containerd')!;
      const s = r.get('stove')!;
      rows.push([label, ms(median(c.cold)), ms(median(s.cold)), `${(median(s.cold) / median(c.cold)).toFixed(2)}×`, ms(median(c.warm)), ms(median(s.warm))]);
    }
    process.stdout.write(
      heading('Pull benchmark', `medians of ${RUNS} cold and ${WARM_RUNS} warm pulls over the CRI from a loopback docker-registry`) + `${table(rows)}\n`,
    );
  } finally {
    await stove?.stop().catch(() => {});
    await stove?.cleanup().catch(() => {});
    await containerd?.stop().catch(() => {});
    await registry?.stop().catch(() => {});
  }
}

runBench(main);
