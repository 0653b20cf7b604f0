/**
 * Pod start on a real node: the single-node cluster of test/e2e/cluster/ (up.sh: Kubernetes v1.36, its
 * kubelet on Stove; then on containerd 2.x, CLUSTER_RUNTIME=containerd), a Deployment of `pods` busybox
 * pods per round.
 *
 *   node dist/bench/pod-start.js [--pods 30] [--rounds 3] [--warmup 0] [--only stove|containerd] [--keep DIR] [--rpc-times]
 *
 * Per runtime: up.sh, the busybox image pulled through the runtime's CRI before the first round (so no
 * round times a pull), `warmup` untimed rounds, `rounds` timed ones, down.sh (also when a round fails
 * or the script is interrupted). A round creates the Deployment through the API and times, on a watch
 * of its pods opened before the create, the first and the last pod Ready; it scrapes the kubelet's
 * /metrics (through the API server's node proxy) before and after, for the kubelet's own
 * `kubelet_pod_start_sli_duration_seconds` (from a pod's creation timestamp to its containers seen
 * running, pulls excluded) and `kubelet_runtime_operations_duration_seconds` (each CRI call as the
 * kubelet timed it),
 * and reads each pod's `podStartSLOduration` from the kubelet's log. Then it deletes the Deployment and
 * waits until its pods are gone from the API and their sandboxes from the runtime (CRI
 * ListPodSandbox), so every round starts from the same node.
 *
 * Stove runs at `info` (containerd at `warn`, as up.sh starts it); `--rpc-times` runs it at `debug` and
 * adds its own handler time per RPC. Its `pod sandbox ready` and `container created` lines give the
 * medians of its steps. `--keep DIR` keeps each cluster's logs there.
 */
import { cp, mkdir, open, readFile, stat } from 'node:fs/promises';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { PullImageRequest } from '../src/gen/runtime/v1/api.js';
import { criClients } from '../test/helpers/cri-client.js';
import { CLUSTER_DIR, NODE_NAME, clusterDown, clusterUp, versionOf, type Cluster, type ClusterRuntime } from './lib/cluster.js';
import { difference, histograms, mean, quantile, type Histogram } from './lib/histogram.js';
import { cpuMsOf } from './lib/processes.js';
import { benchOptions, heading, runBench } from './lib/run.js';
import { median, ms, p90, table } from './lib/stats.js';

const USAGE = 'node dist/bench/pod-start.js [--pods 30] [--rounds 3] [--warmup 0] [--only stove|containerd] [--keep DIR] [--rpc-times]';
const values = benchOptions(USAGE, {
  pods: { type: 'string', default: '30' },
  rounds: { type: 'string', default: '3' },
  warmup: { type: 'string', default: '0' },
  only: { type: 'string' },
  keep: { type: 'string' },
  'rpc-times': { type: 'boolean' },
});
const PODS = Number(values.pods);
const ROUNDS = Number(values.rounds);
const WARMUP = Number(values.warmup);
const NAMESPACE = 'pod-start';
const READY_TIMEOUT_MS = 300_000;
const GONE_TIMEOUT_MS = 240_000;

/** `Kubernetes v1.36.x`, from the first cluster's kubelet. */
let kubernetesVersion = '';

const SLI = 'kubelet_pod_start_sli_duration_seconds';
const RUNTIME_OPS = 'kubelet_runtime_operations_duration_seconds';
/** The kubelet's CRI calls shown, in the order a pod start makes them. */
const OPS = ['run_podsandbox', 'podsandbox_status', 'create_container', 'start_container', 'container_status', 'list_podsandbox', 'list_containers'];

interface Round {
  /** From the Deployment's create to its first and its last pod Ready (ms). */
  firstReadyMs: number;
  allReadyMs: number;
  sli: Histogram;
  ops: Map<string, Histogram>;
  /** Each pod's podStartSLOduration from the kubelet's log (s). */
  podSlo: number[];
  /** The runtime daemon's CPU time (user + system) from the create to the last pod Ready (ms). */
  daemonCpuMs: number;
  /** The whole machine's busy CPU time over the same stretch (ms, all cores). */
  machineCpuMs: number;
  /** From the delete to the pods gone from the API and their sandboxes from the runtime (ms). */
  goneMs: number;
  /** Stove's own lines of the round (empty for containerd). */
  stoveLog: string[];
}

interface RuntimeRun {
  name: ClusterRuntime;
  version: string;
  rounds: Round[];
}

function deployment(name: string, image: string): unknown {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, namespace: NAMESPACE },
    spec: {
      replicas: PODS,
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: {
          terminationGracePeriodSeconds: 1,
          containers: [
            // A shell that leaves at once on TERM, so a round's pods go quickly.
            { name: 'main', image, imagePullPolicy: 'IfNotPresent', command: ['sh', '-c', 'trap "exit 0" TERM; sleep 3600 & wait'] },
          ],
        },
      },
    },
  };
}

interface PodJson {
  metadata: { uid: string };
  status?: { conditions?: { type: string; status: string }[] };
}

function isReady(pod: PodJson): boolean {
  return (pod.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

async function poll<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

interface Scrape {
  sli: Histogram | undefined;
  ops: Map<string, Histogram>;
}

async function scrape(c: Cluster): Promise<Scrape> {
  const text = await c.api.text(`/api/v1/nodes/${NODE_NAME}/proxy/metrics`);
  const ops = new Map<string, Histogram>();
  for (const [labels, h] of histograms(text, RUNTIME_OPS)) {
    const op = /operation_type="([^"]+)"/.exec(labels)?.[1];
    if (op) ops.set(op, h);
  }
  return { sli: histograms(text, SLI).get(''), ops };
}

const EMPTY: Histogram = { buckets: [], sum: 0, count: 0 };

/** What a log file holds past `offset` (the lines a round added). */
async function logSince(path: string, offset: number): Promise<string[]> {
  const file = await open(path, 'r');
  try {
    const size = (await file.stat()).size;
    const buf = Buffer.alloc(Math.max(0, size - offset));
    await file.read(buf, 0, buf.length, offset);
    return buf.toString().split('\n');
  } finally {
    await file.close();
  }
}

/** CPU time the machine spent on anything but idle and I/O wait since boot (ms, all cores; /proc/stat). */
async function machineBusyMs(): Promise<number> {
  const line = (await readFile('/proc/stat', 'utf8')).split('\n')[0]!;
  const ticks = line.trim().split(/\s+/).slice(1, 9).map(Number); // user nice system idle iowait irq softirq steal
  return ((ticks.reduce((a, b) => a + b, 0) - ticks[3]! - ticks[4]!) * 1000) / 100; // USER_HZ
}

const sizeOf = (path: string) => stat(path).then((s) => s.size, () => 0);

/** Each pod's podStartSLOduration in the kubelet's `Observed pod startup duration` lines. */
function podSloOf(kubeletLines: string[], name: string): number[] {
  const re = new RegExp(`"Observed pod startup duration" pod="${NAMESPACE}/${name}-[^"]*" podStartSLOduration=([0-9.e+-]+)`);
  return kubeletLines.flatMap((l) => {
    const m = re.exec(l);
    return m ? [Number(m[1])] : [];
  });
}

async function round(c: Cluster, name: string): Promise<Round> {
  const image = c.images.BUSYBOX_IMAGE!;
  const before = await scrape(c);
  const kubeletLog = c.log('kubelet');
  const stoveLogPath = c.log('stove');
  const offsets = { kubelet: await sizeOf(kubeletLog), stove: await sizeOf(stoveLogPath) };
  const daemon = c.pid(c.runtime);
  const pods = `/api/v1/namespaces/${NAMESPACE}/pods?labelSelector=app%3D${name}`;
  const list = await c.api.call<{ metadata: { resourceVersion: string } }>('GET', pods);

  const ready = new Set<string>();
  let created = 0;
  let firstReadyMs = NaN;
  let allReadyMs = NaN;
  const watch = await c.api.watch<PodJson>(pods, list.metadata.resourceVersion, (type, pod) => {
    if (type === 'DELETED' || !isReady(pod) || ready.has(pod.metadata.uid)) return false;
    ready.add(pod.metadata.uid);
    const at = performance.now() - created;
    if (ready.size === 1) firstReadyMs = at;
    if (ready.size < PODS) return false;
    allReadyMs = at;
    return true;
  });
  const cpuBefore = await cpuMsOf(daemon);
  const machineBefore = await machineBusyMs();
  created = performance.now();
  try {
    await c.api.call('POST', `/apis/apps/v1/namespaces/${NAMESPACE}/deployments`, deployment(name, image));
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_r, reject) => {
      timer = setTimeout(() => reject(new Error(`${ready.size} of ${PODS} pods Ready after ${READY_TIMEOUT_MS / 1000} s`)), READY_TIMEOUT_MS);
    });
    await Promise.race([watch.done, timeout]).finally(() => clearTimeout(timer));
  } finally {
    watch.close();
  }
  const daemonCpuMs = (await cpuMsOf(daemon)) - cpuBefore;
  const machineCpuMs = (await machineBusyMs()) - machineBefore;

  // The kubelet records a pod's start once it sees the pod running on its own watch: moments after ours.
  const after = await poll(`the kubelet's ${SLI} to count ${PODS} more pods`, 30_000, async () => {
    const s = await scrape(c);
    return (s.sli?.count ?? 0) - (before.sli?.count ?? 0) >= PODS ? s : undefined;
  });
  const ops = new Map<string, Histogram>();
  for (const [op, h] of after.ops) ops.set(op, difference(h, before.ops.get(op)));
  const kubeletLines = await logSince(kubeletLog, offsets.kubelet);
  const stoveLog = c.runtime === 'stove' ? await logSince(stoveLogPath, offsets.stove) : [];

  const goneStarted = performance.now();
  await removeDeployment(c, name);
  return {
    firstReadyMs,
    allReadyMs,
    sli: difference(after.sli ?? EMPTY, before.sli),
    ops,
    podSlo: podSloOf(kubeletLines, name),
    daemonCpuMs,
    machineCpuMs,
    goneMs: performance.now() - goneStarted,
    stoveLog,
  };
}

/** Deletes the Deployment; waits until its pods are gone from the API and their sandboxes from the runtime. */
async function removeDeployment(c: Cluster, name: string): Promise<void> {
  await c.api.call('DELETE', `/apis/apps/v1/namespaces/${NAMESPACE}/deployments/${name}`, { propagationPolicy: 'Background' });
  await poll(`the pods of ${name} gone from the API`, GONE_TIMEOUT_MS, async () => {
    const list = await c.api.call<{ items: unknown[] }>('GET', `/api/v1/namespaces/${NAMESPACE}/pods?labelSelector=app%3D${name}`);
    return list.items.length === 0 ? true : undefined;
  });
  const cri = criClients(c.socket);
  try {
    // The kubelet removes the stopped sandboxes of deleted pods itself, within a minute or so.
    await poll(`the sandboxes of ${name} removed from ${c.runtime}`, GONE_TIMEOUT_MS, async () => {
      const { items } = await cri.runtime.listPodSandbox({ filter: { id: '', state: undefined, labelSelector: { 'io.kubernetes.pod.namespace': NAMESPACE } } });
      return items.length === 0 ? true : undefined;
    });
  } finally {
    cri.close();
  }
}

async function prepare(c: Cluster): Promise<void> {
  await c.api.call('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NAMESPACE } });
  // Pods of a namespace without its default service account are refused (and the ReplicaSet backs off).
  await poll(`the default service account in ${NAMESPACE}`, 60_000, () =>
    c.api.call('GET', `/api/v1/namespaces/${NAMESPACE}/serviceaccounts/default`).then(() => true, () => undefined),
  );
  const cri = criClients(c.socket);
  try {
    await cri.image.pullImage(PullImageRequest.fromPartial({ image: { image: c.images.BUSYBOX_IMAGE! } }));
  } finally {
    cri.close();
  }
}

async function runOn(runtime: ClusterRuntime): Promise<RuntimeRun> {
  process.stderr.write(`pod-start: cluster up on ${runtime}\n`);
  const env = { STOVE_LOG_LEVEL: values['rpc-times'] ? 'debug' : 'info' };
  const run: RuntimeRun = { name: runtime, version: '', rounds: [] };
  try {
    const c = await clusterUp(runtime, env);
    try {
      run.version = runtime === 'containerd' ? await versionOf(join(c.binDir, 'containerd')) : '';
      kubernetesVersion ||= await versionOf(join(c.binDir, 'kubelet'));
      await prepare(c);
      for (let r = 0; r < WARMUP + ROUNDS; r++) {
        const result = await round(c, `pods-${r + 1}`);
        const label = r < WARMUP ? `warm-up ${r + 1}/${WARMUP}` : `round ${r - WARMUP + 1}/${ROUNDS}`;
        process.stderr.write(`pod-start: ${runtime} ${label}: first Ready ${ms(result.firstReadyMs)}, all ${PODS} Ready ${ms(result.allReadyMs)}, gone in ${ms(result.goneMs)}\n`);
        if (r >= WARMUP) run.rounds.push(result);
      }
    } finally {
      await c.api.close();
    }
  } finally {
    if (values.keep) {
      const dir = join(values.keep, runtime);
      await mkdir(dir, { recursive: true });
      await cp(join(CLUSTER_DIR, 'logs'), dir, { recursive: true }).catch(() => {});
    }
    process.stderr.write(`pod-start: cluster down (${runtime})\n`);
    await clusterDown();
  }
  return run;
}

// --- The report -------------------------------------------------------------------------------------------------

const seconds = (s: number) => ms(s * 1000);
const ratio = (stove: number, containerd: number) => (Number.isFinite(stove / containerd) ? `${(stove / containerd).toFixed(2)}×` : '-');

/** The rows of the main table: one figure per round, its median over the rounds. */
const FIGURES: { label: string; of: (r: Round) => number; show: (v: number) => string }[] = [
  { label: `**create → all ${PODS} pods Ready** (wall clock)`, of: (r) => r.allReadyMs, show: ms },
  { label: 'create → first pod Ready (wall clock)', of: (r) => r.firstReadyMs, show: ms },
  { label: `${SLI}: mean (sum/count)`, of: (r) => mean(r.sli), show: seconds },
  { label: `${SLI}: p50 (histogram estimate)`, of: (r) => quantile(r.sli, 0.5), show: seconds },
  { label: `${SLI}: p90 (histogram estimate)`, of: (r) => quantile(r.sli, 0.9), show: seconds },
  { label: 'podStartSLOduration per pod, kubelet log: median', of: (r) => median(r.podSlo), show: seconds },
  { label: 'podStartSLOduration per pod, kubelet log: p90', of: (r) => p90(r.podSlo), show: seconds },
  { label: 'runtime daemon CPU, create → all Ready', of: (r) => r.daemonCpuMs, show: ms },
  { label: `machine CPU busy (${cpus().length} cores), create → all Ready`, of: (r) => r.machineCpuMs, show: ms },
];

function medianOf(run: RuntimeRun | undefined, of: (r: Round) => number): number {
  return run ? median(run.rounds.map(of).filter((v) => Number.isFinite(v))) : NaN;
}

function report(runs: RuntimeRun[]): string {
  const stove = runs.find((r) => r.name === 'stove');
  const containerd = runs.find((r) => r.name === 'containerd');
  const details = `${kubernetesVersion} single node; ${PODS} busybox sleep pods per Deployment, ${ROUNDS} rounds per runtime${WARMUP ? ` after ${WARMUP} warm-up` : ''}, image pulled beforehand`;
  let out = heading('Pod start benchmark', details, containerd?.version || undefined);
  const show = (run: RuntimeRun | undefined, f: (typeof FIGURES)[number]) => {
    const v = medianOf(run, f.of);
    return Number.isFinite(v) ? f.show(v) : '-';
  };
  const rows = [['median of the rounds', 'containerd', 'stove', 'stove/containerd']];
  for (const f of FIGURES) rows.push([f.label, show(containerd, f), show(stove, f), ratio(medianOf(stove, f.of), medianOf(containerd, f.of))]);
  out += `${table(rows)}\n`;

  const each = (run: RuntimeRun | undefined, of: (r: Round) => number, f: (v: number) => string) => (run ? run.rounds.map((r) => f(of(r))).join(', ') : '-');
  const byRound = [['by round', 'containerd', 'stove']];
  byRound.push([`all ${PODS} Ready`, each(containerd, (r) => r.allReadyMs, ms), each(stove, (r) => r.allReadyMs, ms)]);
  byRound.push([`${SLI} mean`, each(containerd, (r) => mean(r.sli), seconds), each(stove, (r) => mean(r.sli), seconds)]);
  byRound.push(['pods the SLI counted', each(containerd, (r) => r.sli.count, String), each(stove, (r) => r.sli.count, String)]);
  byRound.push(['delete → gone from the runtime', each(containerd, (r) => r.goneMs, ms), each(stove, (r) => r.goneMs, ms)]);
  out += `\n${table(byRound)}\n`;

  const opRows = [['the kubelet\'s CRI calls (mean per call, all rounds)', 'calls per round (containerd / stove)', 'containerd', 'stove', 'stove/containerd']];
  for (const op of OPS) {
    const total = (run: RuntimeRun | undefined) => {
      const hs = run?.rounds.map((r) => r.ops.get(op) ?? EMPTY) ?? [];
      return { sum: hs.reduce((s, h) => s + h.sum, 0), count: hs.reduce((s, h) => s + h.count, 0), rounds: hs.length };
    };
    const [s, c] = [total(stove), total(containerd)];
    const meanMs = (t: typeof s) => (t.count > 0 ? (t.sum / t.count) * 1000 : NaN);
    const calls = [c, s].map((t) => (t.rounds ? String(Math.round(t.count / t.rounds)) : '-')).join(' / ');
    opRows.push([op, calls, Number.isFinite(meanMs(c)) ? ms(meanMs(c)) : '-', Number.isFinite(meanMs(s)) ? ms(meanMs(s)) : '-', ratio(meanMs(s), meanMs(c))]);
  }
  out += `\n${table(opRows)}\n`;
  if (stove) out += stoveSteps(stove);
  return out;
}

/** A log line's JSON object; undefined for anything else (a line cut off where the round's read ended). */
function jsonLine(line: string): unknown {
  if (!line.startsWith('{')) return undefined;
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}

/** Medians of Stove's own step timings over every round (its `pod sandbox ready`, `container created/started` lines). */
function stoveSteps(run: RuntimeRun): string {
  const steps = new Map<string, number[]>();
  const rpcs = new Map<string, number[]>();
  const add = (m: Map<string, number[]>, k: string, v: number) => m.set(k, [...(m.get(k) ?? []), v]);
  for (const line of run.rounds.flatMap((r) => r.stoveLog)) {
    const entry = jsonLine(line) as { msg?: string; ms?: number; steps?: Record<string, number>; rpc?: string; durationMs?: number } | undefined;
    if (!entry) continue;
    const prefix = entry.msg === 'pod sandbox ready' ? 'RunPodSandbox' : entry.msg === 'container created' ? 'CreateContainer' : entry.msg === 'container started' ? 'StartContainer' : '';
    if (prefix && entry.ms !== undefined) {
      add(steps, `${prefix}: total`, entry.ms);
      for (const [k, v] of Object.entries(entry.steps ?? {})) add(steps, `${prefix}: ${k}`, v);
    }
    if (entry.msg === 'rpc' && entry.rpc && entry.durationMs !== undefined) add(rpcs, entry.rpc, entry.durationMs);
  }
  if (steps.size === 0) return '';
  const rows = [['Stove\'s own steps (its log, all rounds)', 'count', 'median', 'p90']];
  for (const [k, v] of [...steps].sort(([a], [b]) => a.localeCompare(b))) rows.push([k, String(v.length), ms(median(v)), ms(p90(v))]);
  let out = `\n${table(rows)}\n`;
  if (rpcs.size > 0) {
    const rpcRows = [['Stove handler time (debug log, all rounds)', 'calls', 'median', 'p90', 'total']];
    for (const [rpc, v] of [...rpcs].sort(([a], [b]) => a.localeCompare(b))) {
      rpcRows.push([rpc, String(v.length), ms(median(v)), ms(p90(v)), ms(v.reduce((s, x) => s + x, 0))]);
    }
    out += `\n${table(rpcRows)}\n`;
  }
  return out;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root (up.sh starts a node)');
  const runtimes: ClusterRuntime[] = values.only ? [values.only as ClusterRuntime] : ['stove', 'containerd'];
  if (!runtimes.every((r) => r === 'stove' || r === 'containerd')) throw new Error(`--only is stove or containerd, not ${values.only}`);
  const runs: RuntimeRun[] = [];
  for (const runtime of runtimes) runs.push(await runOn(runtime));
  process.stdout.write(report(runs));
}

runBench(main, clusterDown);
