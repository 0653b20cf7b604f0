/**
 * cri-tools' own benchmark (`critest -benchmark`) against Stove and against containerd (Debian's 1.6
 * with its CRI plugin), both started here, the runtimes taking turns over `rounds` rounds.
 *
 *   node dist/bench/critest-benchmark.js [--rounds 3] [--lifecycles 100] [--parallel 4] [--images 40] [--only stove|containerd] [--keep DIR] [--rpc-times]
 *
 * critest is only run, never built: `$CRITEST`, or the one `test/e2e/critest.sh` builds from the cri-tools
 * version pinned in test/e2e/critest/go.mod (in $STOVE_E2E_CACHE/cri-tools/<version>/). Its images
 * come from a loopback registry holding images built here: the container image it creates
 * (registry.k8s.io/e2e-test-images/busybox:1.29-2, reached through each runtime's registry mirror
 * setting, as on an air-gapped node) and the pull and listing images, named in its params file.
 *
 * Per runtime and round, after pulling the same images into both runtimes (so ListImages answers the
 * same list): one critest run of the ImageListing benchmark alone (its AfterEach removes the listing
 * images), then one of every other benchmark: ContainerOps and PodLifecycle (`lifecycles` each,
 * `parallel` at a time), ImageLifecycle (`images`, one at a time) and the single pod + container start.
 * Prints medians and p90 of every operation over all rounds with the Stove/containerd ratio, the ratio
 * round by round, and the daemons' own CPU time (user + system from /proc/<pid>/stat) per main run.
 * `--rpc-times` runs Stove at debug log level and adds the medians of its own handler time per RPC
 * (its `rpc` log lines: from the decoded request to the answer, without the transport); the debug
 * log costs time of its own, so the comparison table of such a run is not the one to quote.
 */
import { spawn } from 'node:child_process';
import { accessSync, constants, existsSync, openSync, closeSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PullImageRequest } from '../src/gen/runtime/v1/api.js';
import { cgroupDirs, detectCgroups, removeCgroup } from '../src/platform/cgroups.js';
import type { CriClients } from '../test/helpers/cri-client.js';
import { pushBusyboxImage } from '../test/helpers/image-builder.js';
import { PodBench } from './lib/pods.js';
import { cpuMsOf } from './lib/processes.js';
import { benchOptions, heading, runBench } from './lib/run.js';
import { comparisonRows, median, ms, p90, table } from './lib/stats.js';

const USAGE = 'node dist/bench/critest-benchmark.js [--rounds 3] [--lifecycles 100] [--parallel 4] [--images 40] [--only stove|containerd] [--keep DIR] [--rpc-times]';
const values = benchOptions(USAGE, {
  rounds: { type: 'string', default: '3' },
  lifecycles: { type: 'string', default: '100' },
  parallel: { type: 'string', default: '4' },
  images: { type: 'string', default: '40' },
  only: { type: 'string' },
  keep: { type: 'string' },
  'rpc-times': { type: 'boolean' },
});
const ROUNDS = Number(values.rounds);
const LIFECYCLES = Number(values.lifecycles);
const PARALLEL = Number(values.parallel);
const IMAGES = Number(values.images);

/** The critest `test/e2e/critest.sh` builds: cri-tools of the version test/e2e/critest/go.mod pins. */
function builtCritest(): string {
  const goMod = readFileSync(new URL('../../test/e2e/critest/go.mod', import.meta.url), 'utf8');
  const version = /^\s*sigs\.k8s\.io\/cri-tools (v\S+)/m.exec(goMod)?.[1] ?? 'unknown';
  return join(process.env.STOVE_E2E_CACHE ?? '/var/cache/stove-e2e', 'cri-tools', version, 'critest');
}
const CRITEST = process.env.CRITEST ?? builtCritest();
/** critest's container image (`framework.DefaultLinuxContainerImage`), pulled through a mirror. */
const CONTAINER_IMAGE = 'registry.k8s.io/e2e-test-images/busybox:1.29-2';
const LISTING_IMAGES = 5;

/** Each results file critest writes, its operations in order, and the row label of each. */
const RESULT_SETS = [
  {
    file: 'container_benchmark_data.json',
    ops: { CreateContainer: 'CreateContainer', StartContainer: 'StartContainer', StatusContainer: 'ContainerStatus', StopContainer: 'StopContainer', RemoveContainer: 'RemoveContainer' },
    total: 'container lifecycle',
  },
  {
    file: 'pod_benchmark_data.json',
    ops: { CreatePod: 'RunPodSandbox', StatusPod: 'PodSandboxStatus', StopPod: 'StopPodSandbox', RemovePod: 'RemovePodSandbox' },
    total: 'pod lifecycle',
  },
  { file: 'image_lifecycle_benchmark_data.json', ops: { PullImage: 'PullImage', StatusImage: 'ImageStatus', RemoveImage: 'RemoveImage' } },
  { file: 'image_listing_benchmark_data.json', ops: { ListImages: 'ListImages' } },
] as const satisfies readonly { file: string; ops: Record<string, string>; total?: string }[];
const START = 'pod + container start';
/** Table rows, in order; the lifecycle totals are the sums of their cycle's operations. */
const ROWS = [
  'container lifecycle',
  ...Object.values(RESULT_SETS[0].ops),
  'pod lifecycle',
  ...Object.values(RESULT_SETS[1].ops),
  ...Object.values(RESULT_SETS[2].ops),
  ...Object.values(RESULT_SETS[3].ops),
  START,
];
/** What the ImageListing run leaves out, and the main run: ginkgo skip patterns on spec names. */
const ALL_BUT_LISTING = 'basic operations on|lifecycle of PodSandbox|start a container from scratch';
const LISTING = 'listing Image';

type Times = Record<string, number[]>;

interface Runtime {
  name: 'stove' | 'containerd';
  socket: string;
  pid: number;
  clients: CriClients;
  /** Every sample of every round, ms. */
  times: Times;
  /** The samples of each round. */
  rounds: Times[];
  /** Daemon CPU seconds of each round's main run. */
  cpu: number[];
  /** Images ListImages answered with. */
  listed?: number;
}

interface ResultsSet {
  operationsNames: string[];
  datapoints: { operationsDurationsNs: number[] }[];
}

const bench = new PodBench();
let interrupted = false;
let running: ReturnType<typeof spawn> | undefined;

/** Runs critest's benchmarks against a runtime, skipping the specs `skip` matches; output in `dir`. */
async function critest(rt: Runtime, dir: string, params: string, skip: string): Promise<void> {
  // A signal before the run began: not a whole critest run before the script stops.
  if (interrupted) throw new Error('interrupted');
  await mkdir(dir, { recursive: true });
  const endpoint = `unix://${rt.socket}`;
  const args = ['-benchmark', '--runtime-endpoint', endpoint, '--image-endpoint', endpoint, '--benchmarking-params-file', params];
  args.push('--benchmarking-output-dir', dir, '--ginkgo.json-report', join(dir, 'report.json'), '--ginkgo.no-color', '--ginkgo.skip', skip);
  const log = openSync(join(dir, 'critest.log'), 'w');
  // Its working dir and TMPDIR are the run's own dir (it looks for a crictl.yaml beside itself and in the working dir).
  const child = spawn(CRITEST, args, { cwd: dir, env: { ...process.env, TMPDIR: dir }, stdio: ['ignore', log, log] });
  running = child;
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (c) => resolve(c));
  }).finally(() => {
    running = undefined;
    closeSync(log);
  });
  if (interrupted) throw new Error('interrupted');
  if (code !== 0) {
    const lines = (await readFile(join(dir, 'critest.log'), 'utf8')).split('\n');
    // The runtime's own words: a failed expectation prints the gRPC error far above the log's end.
    const rpcErrors = [...new Set(lines.filter((l) => l.includes('rpc error')).map((l) => l.trim()))].slice(0, 5);
    const said = rpcErrors.length > 0 ? `\nits rpc errors:\n${rpcErrors.join('\n')}` : '';
    throw new Error(`critest against ${rt.name} exited with ${code}; the end of its log (${dir}/critest.log):\n${lines.slice(-40).join('\n')}${said}`);
  }
}

/** The samples of one critest run's result files, in ms, keyed by table row. */
async function readResults(dir: string): Promise<Times> {
  const times: Times = {};
  const add = (key: string, v: number) => (times[key] ??= []).push(v);
  for (const set of RESULT_SETS) {
    const path = join(dir, set.file);
    if (!existsSync(path)) continue;
    const results = JSON.parse(await readFile(path, 'utf8')) as ResultsSet;
    const labels = results.operationsNames.map((op) => (set.ops as Record<string, string>)[op] ?? op);
    for (const point of results.datapoints) {
      const durations = point.operationsDurationsNs.map((ns) => ns / 1e6);
      durations.forEach((d, i) => add(labels[i]!, d));
      if ('total' in set) add(set.total, durations.reduce((a, b) => a + b, 0));
    }
  }
  // The pod + container start is a gmeasure experiment in the ginkgo report, not a results file.
  const report = join(dir, 'report.json');
  if (existsSync(report)) {
    for (const d of startDurations(JSON.parse(await readFile(report, 'utf8')))) add(START, d / 1e6);
  }
  return times;
}

/** Durations (ns) of the start-container-benchmark experiment's measurements in a ginkgo JSON report. */
function startDurations(report: unknown): number[] {
  type Entry = { Name: string; Value?: { AsJSON?: string } };
  const suites = report as { SpecReports?: { ReportEntries?: Entry[] }[] }[];
  const out: number[] = [];
  for (const spec of suites.flatMap((s) => s.SpecReports ?? [])) {
    for (const entry of spec.ReportEntries ?? []) {
      if (entry.Name !== 'start-container-benchmark' || !entry.Value?.AsJSON) continue;
      const experiment = JSON.parse(entry.Value.AsJSON) as { Measurements?: { Durations?: number[] }[] };
      for (const m of experiment.Measurements ?? []) out.push(...(m.Durations ?? []));
    }
  }
  return out;
}

/** Pulls the images both runtimes should hold before a round, so ListImages answers the same list. */
async function pullAll(rt: Runtime, images: string[]): Promise<void> {
  for (const image of images) await rt.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image } }));
  rt.listed = (await rt.clients.image.listImages({ filter: undefined })).images.length;
}

/** Stops and removes whatever pods a failed critest run left behind. */
async function removePods(rt: Runtime): Promise<void> {
  const pods = await rt.clients.runtime.listPodSandbox({ filter: undefined }).catch(() => ({ items: [] }));
  for (const pod of pods.items) {
    await rt.clients.runtime.stopPodSandbox({ podSandboxId: pod.id }).catch(() => {});
    await rt.clients.runtime.removePodSandbox({ podSandboxId: pod.id }).catch(() => {});
  }
}

async function round(rt: Runtime, work: string, r: number, params: string, images: string[]): Promise<void> {
  const dir = join(work, `round${r + 1}-${rt.name}`);
  const samples: Times = {};
  const merge = (t: Times) => {
    for (const [k, v] of Object.entries(t)) {
      (samples[k] ??= []).push(...v);
      (rt.times[k] ??= []).push(...v);
    }
  };
  try {
    await pullAll(rt, images);
    await critest(rt, join(dir, 'listing'), params, ALL_BUT_LISTING);
    merge(await readResults(join(dir, 'listing')));
    const cpuMs = await cpuMsOf(rt.pid);
    await critest(rt, join(dir, 'main'), params, LISTING);
    rt.cpu.push(((await cpuMsOf(rt.pid)) - cpuMs) / 1000);
    merge(await readResults(join(dir, 'main')));
  } finally {
    await removePods(rt);
  }
  rt.rounds.push(samples);
  process.stderr.write(`  round ${r + 1}/${ROUNDS}: ${rt.name} done\n`);
}

function report(runtimes: Runtime[]): string {
  const of = (name: Runtime['name']) => runtimes.find((rt) => rt.name === name);
  const [stove, containerd] = [of('stove'), of('containerd')];
  const details =
    `critest -benchmark, ${ROUNDS} rounds alternating the runtimes; ${LIFECYCLES} container and ${LIFECYCLES} pod lifecycles ${PARALLEL} at a time, ` +
    `${IMAGES} image lifecycles and ListImages calls one at a time, ListImages of ${stove?.listed ?? containerd?.listed} images`;
  let out = heading('critest benchmark', details);
  // With --lifecycles 0 critest skips the lifecycle benchmarks: only rows with samples are shown.
  const rows = ROWS.filter((key) => runtimes.every((rt) => rt.times[key]?.length));
  out += `${table(comparisonRows('operation (ms)', rows, containerd?.times, stove?.times))}\n`;
  if (stove && containerd) {
    const byRound = [['stove/containerd by round', ...stove.rounds.map((_r, i) => `round ${i + 1}`)]];
    for (const key of rows) {
      byRound.push([key, ...stove.rounds.map((s, i) => {
        const c = containerd.rounds[i]?.[key];
        return s[key]?.length && c?.length ? `${(median(s[key]) / median(c)).toFixed(2)}×` : '-';
      })]);
    }
    out += `\n${table(byRound)}\n`;
  }
  const cpu = (rt: Runtime | undefined) => (rt ? `${median(rt.cpu).toFixed(2)} s` : '-');
  const cpuRatio = stove && containerd ? `${(median(stove.cpu) / median(containerd.cpu)).toFixed(2)}×` : '-';
  const cpuRows = [
    ['daemon CPU, median of the rounds', 'containerd', 'stove', 'stove/containerd'],
    ['main run (lifecycles, image lifecycles, start)', cpu(containerd), cpu(stove), cpuRatio],
  ];
  out += `\n${table(cpuRows)}\n`;
  if (values['rpc-times'] && bench.stove) {
    const rows = [['Stove handler time (debug log)', 'calls', 'median', 'p90']];
    for (const [rpc, times] of rpcTimes(bench.stove.output())) rows.push([rpc, String(times.length), ms(median(times)), ms(p90(times))]);
    out += `\n${table(rows)}\n`;
  }
  return out;
}

/** Stove's own time per RPC from its debug `rpc` lines (`{"msg":"rpc","rpc":…,"durationMs":…}`). */
function rpcTimes(output: string): Map<string, number[]> {
  const times = new Map<string, number[]>();
  for (const line of output.split('\n')) {
    if (!line.includes('"msg":"rpc"')) continue;
    const entry = JSON.parse(line) as { rpc: string; durationMs: number };
    times.set(entry.rpc, [...(times.get(entry.rpc) ?? []), entry.durationMs]);
  }
  return new Map([...times].sort(([a], [b]) => a.localeCompare(b)));
}

async function main(): Promise<void> {
  try {
    accessSync(CRITEST, constants.X_OK);
  } catch {
    process.stderr.write(
      `no critest at ${CRITEST}: run test/e2e/critest.sh once (it builds critest from test/e2e/critest/go.mod), ` +
        `or set CRITEST to one\n`,
    );
    process.exit(2);
  }
  if (process.getuid?.() !== 0) throw new Error('run as root (network namespaces, mounts, cgroups)');
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      interrupted = true;
      running?.kill('SIGTERM');
    });
  }
  const layout = await detectCgroups();
  // critest asks containerd 1.6 for its cgroup driver with RuntimeConfig, which it lacks; it then puts
  // pods under `system.slice`, removed afterwards unless it was there before.
  const systemSliceExisted = Object.values(cgroupDirs(layout, '/system.slice')).some((dir) => existsSync(dir));
  // Made last before the try whose finally removes it.
  const work = values.keep ?? (await mkdtemp(join(tmpdir(), 'stove-bench-critest-')));
  const runtimes: Runtime[] = [];
  try {
    await mkdir(work, { recursive: true });
    const registry = await bench.startRegistry();
    const host = registry.host;
    await pushBusyboxImage(registry, 'e2e-test-images/busybox:1.29-2');
    const pull = await pushBusyboxImage(registry, 'bench/critest-pull:1', { extraFiles: [{ path: 'etc/bench-image', content: 'pull\n' }] });
    const listing: string[] = [];
    for (let i = 0; i < LISTING_IMAGES; i++) {
      listing.push((await pushBusyboxImage(registry, `bench/critest-list-${i}:1`, { extraFiles: [{ path: 'etc/bench-image', content: `list ${i}\n` }] })).reference);
    }
    const params = join(work, 'benchmark-params.yaml');
    await writeFile(
      params,
      [
        `containersNumber: ${LIFECYCLES}`,
        `containersNumberParallel: ${PARALLEL}`,
        `podsNumber: ${LIFECYCLES}`,
        `podsNumberParallel: ${PARALLEL}`,
        `imagesNumber: ${IMAGES}`,
        'imagesNumberParallel: 1',
        // Generous: critest fails a spec past these (a pod + container start past 5 s by default),
        // and a shared machine can be that slow; the figures, not these limits, are what is measured.
        'containerBenchmarkTimeoutSeconds: 300',
        'podBenchmarkTimeoutSeconds: 300',
        'imageBenchmarkTimeoutSeconds: 300',
        'podContainerStartBenchmarkTimeoutSeconds: 300',
        `imagePullingBenchmarkImage: ${pull.reference}`,
        'imageListingBenchmarkImages:',
        ...listing.map((image) => `  - ${image}`),
        '',
      ].join('\n'),
    );
    const mirror = { 'registry.k8s.io': registry.url };
    if (values.only !== 'containerd') {
      const toml = `[runtime]\ncgroup_parent = "${bench.cgroupRoot}"\n[registries."registry.k8s.io"]\nmirrors = ["${registry.url}"]\n`;
      const stove = await bench.startStove(toml, values['rpc-times'] ? 'debug' : 'info');
      runtimes.push({ name: 'stove', socket: stove.socket, pid: stove.child.pid!, clients: stove.clients, times: {}, rounds: [], cpu: [] });
    }
    if (values.only !== 'stove') {
      const containerd = await bench.startContainerd({ mirrors: mirror });
      runtimes.push({ name: 'containerd', socket: containerd.socket, pid: containerd.pid, clients: containerd.clients, times: {}, rounds: [], cpu: [] });
    }
    // Both hold containerd's pause image too (Stove's own pause is not an image), so both list the same.
    const images = [CONTAINER_IMAGE, ...listing, ...(bench.pauseImage ? [bench.pauseImage] : [])];
    process.stderr.write(`critest benchmark: ${ROUNDS} rounds in ${work} (registry ${host})\n`);
    for (let r = 0; r < ROUNDS; r++) {
      for (const rt of r % 2 === 0 ? runtimes : [...runtimes].reverse()) await round(rt, work, r, params, images);
    }
    process.stdout.write(report(runtimes));
  } finally {
    for (const rt of runtimes) await removePods(rt);
    // With --keep, Stove's own log goes with critest's: a failed spec's cause is often only there.
    if (values.keep && bench.stove) await writeFile(join(work, 'stove.log'), bench.stove.output()).catch(() => {});
    await bench.cleanup();
    if (!systemSliceExisted) await removeCgroup(layout, '/system.slice').catch(() => {});
    if (!values.keep) await rm(work, { recursive: true, force: true });
  }
}

runBench(main);
