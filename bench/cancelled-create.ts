/**
 * CreateContainer whose client leaves before the answer (a kubelet killed, or its deadline passed),
 * Stove vs containerd: what each leaves for the kubelet's next sync. A kubelet that finds a
 * CONTAINER_CREATED container it never learned of replaces it with attempt 1 (a restart of a container
 * that never ran); a `<n>.log` beside no container makes its retry attempt n + 1.
 *
 *   node dist/bench/cancelled-create.js [--deadlines 20,50,100,200,400,800] [--tries 3] [--only stove|containerd]
 *
 * One pod per runtime; for each deadline, `tries` CreateContainer calls of a busybox `sleep` (a new
 * name each, attempt 0, log path `<name>/0.log`) with that gRPC deadline; 3 s later the runtime's
 * ListContainers and the log directory say what was left. Prints, per runtime and deadline, how many
 * calls failed on the deadline and how many left a container or a log file, and the create's own
 * time without a deadline (median of `tries`).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Metadata } from '@grpc/grpc-js';
import { PullImageRequest } from '../src/gen/runtime/v1/api.js';
import { createCgroup, detectCgroups, removeCgroup } from '../src/platform/cgroups.js';
import { pushBusyboxImage } from '../test/helpers/image-builder.js';
import type { CriClients } from '../test/helpers/cri-client.js';
import { containerdVersion } from './lib/containerd.js';
import { PodBench } from './lib/pods.js';
import { sleepContainerConfig } from './lib/processes.js';
import { benchOptions, heading, runBench } from './lib/run.js';
import { median, ms, table } from './lib/stats.js';

const values = benchOptions('node dist/bench/cancelled-create.js [--deadlines 20,50,100,200,400,800] [--tries 3] [--only stove|containerd]', {
  deadlines: { type: 'string', default: '20,50,100,200,400,800' },
  tries: { type: 'string', default: '3' },
  only: { type: 'string' },
});
const DEADLINES = values.deadlines.split(',').map(Number);
const TRIES = Number(values.tries);

interface Outcome {
  deadline: number;
  failed: number;
  containersLeft: number;
  logsLeft: number;
}

const bench = new PodBench();
const settle = () => new Promise((resolve) => setTimeout(resolve, 3000));

async function measure(name: 'stove' | 'containerd', clients: CriClients, image: string): Promise<{ createMs: number; outcomes: Outcome[] }> {
  const r = clients.runtime;
  const config = bench.podConfig(name, 'cancel');
  await createCgroup(await detectCgroups(), config.linux!.cgroupParent);
  const { podSandboxId } = await r.runPodSandbox({ config, runtimeHandler: '' });
  const left = async (cname: string) => (await r.listContainers({ filter: undefined })).containers.filter((c) => c.metadata?.name === cname);
  const times: number[] = [];
  for (let k = 0; k < TRIES + 1; k++) {
    const t = performance.now();
    const { containerId } = await r.createContainer({ podSandboxId, config: sleepContainerConfig(image, `plain${k}`), sandboxConfig: config });
    if (k > 0) times.push(performance.now() - t); // the first warms up
    await r.removeContainer({ containerId });
  }
  const outcomes: Outcome[] = [];
  for (const deadline of DEADLINES) {
    const outcome: Outcome = { deadline, failed: 0, containersLeft: 0, logsLeft: 0 };
    for (let k = 0; k < TRIES; k++) {
      const cname = `d${deadline}x${k}`;
      const code = await new Promise<number>((resolve) =>
        clients.rawRuntime.createContainer(
          { podSandboxId, config: sleepContainerConfig(image, cname), sandboxConfig: config },
          new Metadata(),
          { deadline: Date.now() + deadline },
          (err) => resolve(err ? err.code : 0),
        ),
      );
      await settle();
      const containers = await left(cname);
      if (code !== 0) {
        outcome.failed++;
        if (containers.length) outcome.containersLeft++;
        if (existsSync(join(config.logDirectory, cname, '0.log'))) outcome.logsLeft++;
      }
      for (const c of containers) await r.removeContainer({ containerId: c.id });
    }
    outcomes.push(outcome);
  }
  await r.stopPodSandbox({ podSandboxId });
  await r.removePodSandbox({ podSandboxId });
  await removeCgroup(await detectCgroups(), config.linux!.cgroupParent).catch(() => {});
  return { createMs: median(times), outcomes };
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root (network namespaces, mounts, cgroups)');
  try {
    const registry = await bench.startRegistry();
    const image = (await pushBusyboxImage(registry, 'bench/sleep:1', { cmd: ['sleep', '3600'] })).reference;
    const results = new Map<string, Awaited<ReturnType<typeof measure>>>();
    if (values.only !== 'containerd') {
      const stove = await bench.startStove();
      await stove.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image } }));
      results.set('stove', await measure('stove', stove.clients, image));
      await bench.stopStove();
    }
    if (values.only !== 'stove') {
      const containerd = await bench.startContainerd();
      await containerd.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image } }));
      results.set('containerd', await measure('containerd', containerd.clients, image));
    }
    const rows = [['', ...results.keys()]];
    rows.push(['CreateContainer without a deadline (median)', ...[...results.values()].map((x) => ms(x.createMs))]);
    for (const [i, deadline] of DEADLINES.entries()) {
      rows.push([
        `deadline ${deadline} ms: calls failed / of them leaving a container / a log file`,
        ...[...results.values()].map((x) => `${x.outcomes[i]!.failed} / ${x.outcomes[i]!.containersLeft} / ${x.outcomes[i]!.logsLeft} (of ${TRIES})`),
      ]);
    }
    process.stdout.write(heading('CreateContainer with its client gone', `${TRIES} calls per deadline`, containerdVersion()) + `${table(rows)}\n`);
  } finally {
    await bench.cleanup();
  }
}

runBench(main, () => bench.cleanup());
