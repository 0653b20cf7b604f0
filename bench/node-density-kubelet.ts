/**
 * A full node under a kubelet: the single-node cluster of test/e2e/cluster/ (Kubernetes v1.36, the
 * kubelet's default `maxPods: 110`) on Stove, then on containerd 2.x (CLUSTER_RUNTIME=containerd).
 *
 *   node dist/bench/node-density-kubelet.js [--pods 110] [--rounds 3] [--steady-seconds 300] [--windows 5]
 *        [--evented both|off|on] [--churn 1000] [--churn-replicas 30] [--only stove|containerd] [--keep DIR] [--cpu-prof DIR]
 *        [--gc-probe]
 *
 * Per runtime: up.sh, the pause image pulled through the runtime's CRI, then
 * 1. `rounds` rounds: a Deployment of pause containers that fills the node to `pods` pods (CoreDNS
 *    counts), timed from the create to every pod Ready on a watch, and the kubelet's
 *    `kubelet_pod_start_sli_duration_seconds` (its /metrics before and after: p50/p90/p99 estimated
 *    from the buckets as Prometheus does); every round but the last deletes it and waits until its
 *    sandboxes are gone from the runtime.
 * 2. With the node full, `steady-seconds` of the kubelet polling as it does by itself (relist every
 *    second, stats for its eviction manager and /metrics/resource), in `windows` windows: CPU per second
 *    of the daemon alone and of all the runtime's processes (daemon, the children it waited for, its
 *    helpers, the monitors: conmons or shims; not the containers), the PSS of the daemon with its
 *    helpers and of the monitors, and the kubelet's CRI calls in the window (its
 *    kubelet_runtime_operations_total). With `--evented both` the same again after a kubelet restart
 *    with the EventedPLEG feature gate (GetContainerEvents, relist every 300 s).
 *    `--cpu-prof DIR`: a V8 CPU profile of Stove's daemon over one more window after the first steady
 *    stretch (through lib/daemon-probe.ts; the profiler costs CPU of its own, so not during the
 *    windows measured), summed up by CRI adapter and per call.
 * 3. The Deployment deleted; then `churn` pod lifecycles through the kubelet: a Deployment of
 *    `churn-replicas` pods restarted (`kubectl rollout restart` as a patch) until that many pods were
 *    replaced; daemon PSS and RSS before and after, and what is left once it is deleted (sandboxes and
 *    containers in the runtime, monitors, mounts under the runtime's dir, network namespaces).
 *    `--gc-probe`: Stove's daemon also answers lib/daemon-probe.ts, and before and after the churn it runs a
 *    full garbage collection and reports its live heap and its PSS after it, so what the churn left alive
 *    stands apart from the heap V8 kept from the burst.
 * down.sh, also when a step fails or the script is interrupted. By hand, never in `make test`;
 * `make bench-node-density-kubelet`.
 */
import { spawn } from 'node:child_process';
import { cp, mkdir, readFile, readdir, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { PullImageRequest } from '../src/gen/runtime/v1/api.js';
import { criClients } from '../test/helpers/cri-client.js';
import { CLUSTER_DIR, CLUSTER_SCRIPTS, NODE_NAME, clusterDown, clusterUp, versionOf, type Cluster, type ClusterRuntime } from './lib/cluster.js';
import { summarizeProfile, type ProfileSummary } from './lib/cpu-profile.js';
import { PROBE_MODULE, probe } from './lib/probe-client.js';
import { difference, histograms, mean, quantile, type Histogram } from './lib/histogram.js';
import { daemonCpuMs, helperPidsOf, mappingsOf, memoryOf, mib, pidsWhere, pssOf, runtimeMemory, type RuntimeMemory } from './lib/processes.js';
import { benchOptions, heading, runBench } from './lib/run.js';
import { median, ms, table } from './lib/stats.js';

const USAGE =
  'node dist/bench/node-density-kubelet.js [--pods 110] [--rounds 3] [--steady-seconds 300] [--windows 5] [--evented both|off|on] [--churn 1000] [--churn-replicas 30] [--only stove|containerd] [--keep DIR] [--cpu-prof DIR] [--gc-probe]';
const values = benchOptions(USAGE, {
  pods: { type: 'string', default: '110' },
  rounds: { type: 'string', default: '3' },
  'steady-seconds': { type: 'string', default: '300' },
  windows: { type: 'string', default: '5' },
  evented: { type: 'string', default: 'both' },
  churn: { type: 'string', default: '1000' },
  'churn-replicas': { type: 'string', default: '30' },
  only: { type: 'string' },
  keep: { type: 'string' },
  'cpu-prof': { type: 'string' },
  'gc-probe': { type: 'boolean', default: false },
});
const PODS = Number(values.pods);
const ROUNDS = Number(values.rounds);
const STEADY_S = Number(values['steady-seconds']);
const WINDOWS = Number(values.windows);
const EVENTED = values.evented === 'both' ? [false, true] : values.evented === 'on' ? [true] : [false];
const CHURN = Number(values.churn);
const CHURN_REPLICAS = Number(values['churn-replicas']);
/** The quiet minute after the churn before the daemon's memory is read again. */
const IDLE_AFTER_CHURN_MS = 60_000;
const NAMESPACE = 'node-density';
const SLI = 'kubelet_pod_start_sli_duration_seconds';
/** The kubelet's own timing of each CRI call, by operation_type: the runtime's share of a pod's start. */
const RUNTIME_OPS = 'kubelet_runtime_operations_duration_seconds';
const START_OPS = ['run_podsandbox', 'create_container', 'start_container'];

let kubernetesVersion = '';

interface Round {
  pods: number;
  allReadyMs: number;
  sli: Histogram;
  /** The kubelet's timing of the start calls (START_OPS) during the round. */
  ops: Map<string, Histogram>;
}

interface Steady extends RuntimeMemory {
  evented: boolean;
  /** Per window: ms of CPU per s, the daemon alone and all processes; the 1-minute load average at its end. */
  windows: { daemon: number; all: number; load: number }[];
  /** The kubelet's CRI calls per second over the stretch, by operation. */
  callsPerS: Map<string, number>;
  profile?: ProfileSummary;
  /** Calls of each operation in the profiled stretch. */
  profileCalls?: Map<string, number>;
}

/** --gc-probe: the daemon after a full collection, before and after the churn (KiB). */
interface GcSample {
  /** V8's live heap, its committed heap, and the buffers outside it. */
  heapUsed: number;
  heapTotal: number;
  external: number;
  pss: number;
  /** Resident memory by kind of mapping: malloc's main arena, other anonymous maps (V8's pages and
   * malloc's thread arenas) without V8's code range, the code range, file-backed pages. */
  brk: number;
  anonMaps: number;
  codeRange: number;
  fileBacked: number;
  threads: number;
}
interface ChurnGc {
  before: GcSample;
  after: GcSample;
}

async function gcSample(daemon: number, probeFile: string): Promise<GcSample> {
  const p = await probe(daemon, probeFile);
  const m = await mappingsOf(daemon);
  const kib = (bytes: number) => bytes / 1024;
  return {
    heapUsed: kib(p.usage.heapUsed),
    heapTotal: kib(p.usage.heapTotal),
    external: kib(p.usage.external),
    pss: await pssOf([daemon]),
    brk: m.brk,
    anonMaps: m.anonMaps - m.codeRange,
    codeRange: m.codeRange,
    fileBacked: m.fileBacked,
    threads: m.threads,
  };
}

interface RuntimeRun {
  name: ClusterRuntime;
  version: string;
  rounds: Round[];
  steady: Steady[];
  churn?: { lifecycles: number; ms: number; pssBefore: number; pssAfter: number; pssIdle: number; rssBefore: number; rssAfter: number; leftovers: string[]; gc?: ChurnGc };
}

function poll<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined>, intervalMs = 1000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  return (async () => {
    for (;;) {
      const value = await check();
      if (value !== undefined) return value;
      if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs / 1000} s`);
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  })();
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface PodJson {
  metadata: { uid: string; name: string; deletionTimestamp?: string };
  spec?: { nodeName?: string };
  status?: { phase?: string; conditions?: { type: string; status: string }[] };
}

const isReady = (pod: PodJson) => (pod.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');

function deployment(name: string, replicas: number, image: string): unknown {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, namespace: NAMESPACE },
    spec: {
      replicas,
      selector: { matchLabels: { app: name } },
      // Churn: a restart replaces every pod, a quarter at a time.
      strategy: { rollingUpdate: { maxSurge: '25%', maxUnavailable: '25%' } },
      template: {
        metadata: { labels: { app: name } },
        spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'pause', image, imagePullPolicy: 'IfNotPresent' }] },
      },
    },
  };
}

async function metricsText(c: Cluster): Promise<string> {
  return c.api.text(`/api/v1/nodes/${NODE_NAME}/proxy/metrics`);
}

/** kubelet_runtime_operations_total by operation. */
function operations(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of text.matchAll(/^kubelet_runtime_operations_total\{operation_type="([^"]+)"\} (\S+)$/gm)) out.set(m[1]!, Number(m[2]));
  return out;
}

function opsDiff(after: Map<string, number>, before: Map<string, number>): Map<string, number> {
  const out = new Map<string, number>();
  for (const [k, v] of after) if (v - (before.get(k) ?? 0) > 0) out.set(k, v - (before.get(k) ?? 0));
  return out;
}

/** Pods of the node not being deleted (CoreDNS and whatever else runs there). */
async function podsOnNode(c: Cluster): Promise<PodJson[]> {
  const list = await c.api.call<{ items: PodJson[] }>('GET', `/api/v1/pods?fieldSelector=spec.nodeName%3D${NODE_NAME}`);
  return list.items.filter((p) => !p.metadata.deletionTimestamp && p.status?.phase !== 'Succeeded' && p.status?.phase !== 'Failed');
}

/** Creates Deployment `name` of `replicas` pods; resolves with the ms from the create to all Ready (on a watch). */
async function createAndWait(c: Cluster, name: string, replicas: number, image: string, timeoutMs = 600_000): Promise<number> {
  const path = `/api/v1/namespaces/${NAMESPACE}/pods?labelSelector=app%3D${name}`;
  const list = await c.api.call<{ metadata: { resourceVersion: string } }>('GET', path);
  const ready = new Set<string>();
  let allReadyMs = NaN;
  let created = 0;
  const watch = await c.api.watch<PodJson>(path, list.metadata.resourceVersion, (type, pod) => {
    if (type === 'DELETED' || !isReady(pod)) return false;
    ready.add(pod.metadata.uid);
    if (ready.size < replicas) return false;
    allReadyMs = performance.now() - created;
    return true;
  });
  created = performance.now();
  try {
    await c.api.call('POST', `/apis/apps/v1/namespaces/${NAMESPACE}/deployments`, deployment(name, replicas, image));
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_r, reject) => {
      timer = setTimeout(() => reject(new Error(`${ready.size} of ${replicas} pods Ready after ${timeoutMs / 1000} s`)), timeoutMs);
    });
    await Promise.race([watch.done, timeout]).finally(() => clearTimeout(timer));
  } finally {
    watch.close();
  }
  return allReadyMs;
}

/** Deletes the Deployment; waits until its pods are gone from the API and their sandboxes from the runtime. */
async function removeDeployment(c: Cluster, name: string): Promise<void> {
  await c.api.call('DELETE', `/apis/apps/v1/namespaces/${NAMESPACE}/deployments/${name}`, { propagationPolicy: 'Background' });
  await poll(`the pods of ${name} gone from the API`, 600_000, async () => {
    const list = await c.api.call<{ items: unknown[] }>('GET', `/api/v1/namespaces/${NAMESPACE}/pods?labelSelector=app%3D${name}`);
    return list.items.length === 0 ? true : undefined;
  });
  await poll(`the sandboxes of ${name} removed from ${c.runtime}`, 600_000, async () => ((await runtimeObjects(c)) === 0 ? true : undefined), 2000);
}

/** Sandboxes and containers of the bench's namespace in the runtime. */
async function runtimeObjects(c: Cluster): Promise<number> {
  const cri = criClients(c.socket);
  try {
    const label = { 'io.kubernetes.pod.namespace': NAMESPACE };
    const pods = await cri.runtime.listPodSandbox({ filter: { id: '', state: undefined, labelSelector: label } });
    const ctrs = await cri.runtime.listContainers({ filter: { id: '', state: undefined, podSandboxId: '', labelSelector: label } });
    return pods.items.length + ctrs.containers.length;
  } finally {
    cri.close();
  }
}

const runtimeDir = (c: Cluster) => join(CLUSTER_DIR, c.runtime);

async function monitorPids(c: Cluster): Promise<number[]> {
  const dir = runtimeDir(c);
  return pidsWhere((a) => (c.runtime === 'stove' ? a[0]!.endsWith('conmon') : a[0]!.endsWith('containerd-shim-runc-v2')) && a.some((x) => x.startsWith(dir + '/')));
}

async function footprint(c: Cluster): Promise<{ monitors: number; mounts: number; netns: number }> {
  const dir = runtimeDir(c);
  const mounts = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').filter((l) => l.split(' ')[4]?.startsWith(dir + '/')).length;
  const netns = c.runtime === 'stove' ? (await readdir(join(dir, 'state/netns')).catch(() => [])).length : (await readdir('/run/netns').catch(() => [])).length;
  return { monitors: (await monitorPids(c)).length, mounts, netns };
}

async function round(c: Cluster, r: number, image: string): Promise<Round> {
  const others = (await podsOnNode(c)).length;
  const pods = PODS - others;
  const beforeText = await metricsText(c);
  const before = histograms(beforeText, SLI).get('');
  const opsBefore = histograms(beforeText, RUNTIME_OPS);
  const allReadyMs = await createAndWait(c, 'fill', pods, image);
  const opsAfter = histograms(await metricsText(c), RUNTIME_OPS);
  const ops = new Map<string, Histogram>();
  for (const op of START_OPS) {
    const key = `operation_type="${op}"`;
    const h = opsAfter.get(key);
    if (h) ops.set(op, difference(h, opsBefore.get(key)));
  }
  const after = await poll(`the kubelet's ${SLI} to count ${pods} more pods`, 60_000, async () => {
    const h = histograms(await metricsText(c), SLI).get('');
    return h && h.count - (before?.count ?? 0) >= pods ? h : undefined;
  });
  process.stderr.write(`node-density-kubelet: ${c.runtime} round ${r}: ${pods} pods (+${others} on the node) Ready in ${ms(allReadyMs)}\n`);
  return { pods, allReadyMs, sli: difference(after, before), ops };
}

async function steady(c: Cluster, evented: boolean, profileDir: string | undefined): Promise<Steady> {
  const daemon = c.pid(c.runtime);
  await sleep(15_000); // the kubelet settles after the starts (or its restart)
  const monitors = await monitorPids(c);
  const helpers = await helperPidsOf(daemon, monitors);
  const result: Steady = { evented, windows: [], ...(await runtimeMemory(daemon, monitors)), callsPerS: new Map() };
  const opsBefore = operations(await metricsText(c));
  const t0 = performance.now();
  const windowMs = (STEADY_S * 1000) / WINDOWS;
  for (let w = 0; w < WINDOWS; w++) {
    const before = await daemonCpuMs(daemon, [...helpers, ...monitors]);
    const t = performance.now();
    await sleep(windowMs);
    const after = await daemonCpuMs(daemon, [...helpers, ...monitors]);
    const s = (performance.now() - t) / 1000;
    result.windows.push({ daemon: (after.daemon - before.daemon) / s, all: (after.all - before.all) / s, load: loadavg()[0]! });
    process.stderr.write(`node-density-kubelet: ${c.runtime} steady${evented ? ' (EventedPLEG)' : ''} window ${w + 1}: daemon ${((after.daemon - before.daemon) / s).toFixed(1)} ms/s, all ${((after.all - before.all) / s).toFixed(1)} ms/s, load ${loadavg()[0]!.toFixed(1)}\n`);
  }
  const seconds = (performance.now() - t0) / 1000;
  const calls = opsDiff(operations(await metricsText(c)), opsBefore);
  for (const [k, v] of calls) result.callsPerS.set(k, v / seconds);
  if (profileDir) {
    // A stretch of its own after the windows: the profiler costs the daemon CPU of its own.
    const had = new Set(await readdir(profileDir));
    const before = operations(await metricsText(c));
    process.kill(daemon, 'SIGWINCH');
    await sleep(windowMs);
    process.kill(daemon, 'SIGWINCH');
    result.profileCalls = opsDiff(operations(await metricsText(c)), before);
    const file = await poll('the CPU profile written', 60_000, async () => (await readdir(profileDir)).find((f) => f.endsWith('.cpuprofile') && !had.has(f)), 500);
    result.profile = await summarizeProfile(join(profileDir, file));
  }
  return result;
}

async function churn(c: Cluster, image: string, probeFile: string | undefined): Promise<RuntimeRun['churn']> {
  const daemon = c.pid(c.runtime);
  const base = await footprint(c);
  await sleep(5000);
  const gcBefore = probeFile ? await gcSample(daemon, probeFile) : undefined;
  const pssBefore = await pssOf([daemon]);
  const rssBefore = (await memoryOf(daemon)).rss;
  const t0 = performance.now();
  await createAndWait(c, 'churn', CHURN_REPLICAS, image);
  // Each pod's lifecycle ends when a rollout replaces it (or, for the last ones, at the delete).
  let lifecycles = CHURN_REPLICAS;
  for (let i = 1; lifecycles < CHURN; i++) {
    // kubectl rollout restart: a new template annotation, so every pod is replaced.
    const patch = { spec: { template: { metadata: { annotations: { 'bench/restart': String(i) } } } } };
    await c.api.call('PATCH', `/apis/apps/v1/namespaces/${NAMESPACE}/deployments/churn`, patch);
    await poll(`churn rollout ${i}`, 600_000, async () => {
      const d = await c.api.call<{ metadata: { generation: number }; status: { observedGeneration?: number; updatedReplicas?: number; readyReplicas?: number; replicas?: number } }>(
        'GET',
        `/apis/apps/v1/namespaces/${NAMESPACE}/deployments/churn`,
      );
      const s = d.status;
      return s.observedGeneration === d.metadata.generation && s.updatedReplicas === CHURN_REPLICAS && s.readyReplicas === CHURN_REPLICAS && s.replicas === CHURN_REPLICAS ? true : undefined;
    });
    lifecycles += CHURN_REPLICAS;
    process.stderr.write(`node-density-kubelet: ${c.runtime} churn: ${lifecycles} lifecycles, ${ms(performance.now() - t0)}\n`);
  }
  await removeDeployment(c, 'churn');
  const churnMs = performance.now() - t0;
  await sleep(5000);
  const leftovers: string[] = [];
  const listed = await runtimeObjects(c);
  if (listed) leftovers.push(`${listed} sandboxes and containers listed`);
  const now = await poll('monitors and mounts back to before', 120_000, async () => {
    const f = await footprint(c);
    return f.monitors <= base.monitors && f.mounts <= base.mounts && f.netns <= base.netns ? f : undefined;
  }).catch(() => footprint(c));
  if (now.monitors > base.monitors) leftovers.push(`${now.monitors - base.monitors} monitors`);
  if (now.mounts > base.mounts) leftovers.push(`${now.mounts - base.mounts} mounts`);
  if (now.netns > base.netns) leftovers.push(`${now.netns - base.netns} network namespaces`);
  const pssAfter = await pssOf([daemon]);
  const rssAfter = (await memoryOf(daemon)).rss;
  // What the daemon keeps once the node has been quiet a minute (no forced collection).
  await sleep(IDLE_AFTER_CHURN_MS);
  const pssIdle = await pssOf([daemon]);
  let gc: ChurnGc | undefined;
  if (probeFile && gcBefore) {
    gc = { before: gcBefore, after: await gcSample(daemon, probeFile) };
  }
  return { lifecycles, ms: churnMs, pssBefore, pssAfter, pssIdle, rssBefore, rssAfter, leftovers, gc };
}

async function restartKubelet(evented: boolean): Promise<void> {
  await new Promise<void>((done, fail) => {
    const env = { ...process.env, KUBELET_CONFIG_PATCH: evented ? 'featureGates: {EventedPLEG: true}' : '' };
    const child = spawn(join(CLUSTER_SCRIPTS, 'restart.sh'), ['kubelet', 'TERM'], { env, stdio: ['ignore', 'ignore', 'inherit'] });
    child.once('error', fail);
    child.once('exit', (code) => (code === 0 ? done() : fail(new Error(`restart.sh kubelet exited ${code}`))));
  });
  await poll('the kubelet healthy again', 120_000, async () => ((await fetch('http://127.0.0.1:10248/healthz').then((r) => r.ok, () => false)) ? true : undefined));
}

async function runOn(runtime: ClusterRuntime): Promise<RuntimeRun> {
  process.stderr.write(`node-density-kubelet: cluster up on ${runtime}\n`);
  const profileDir = runtime === 'stove' && values['cpu-prof'] ? values['cpu-prof'] : undefined;
  if (profileDir) await mkdir(profileDir, { recursive: true });
  const probeFile = runtime === 'stove' && values['gc-probe'] ? join(tmpdir(), `stove-bench-probe-${process.pid}.jsonl`) : undefined;
  const env: Record<string, string> = { STOVE_LOG_LEVEL: 'info' };
  if (profileDir || probeFile) env.NODE_OPTIONS = `--import=${PROBE_MODULE}`;
  if (profileDir) env.STOVE_BENCH_CPU_PROF = profileDir;
  if (probeFile) env.STOVE_BENCH_PROBE = probeFile;
  const run: RuntimeRun = { name: runtime, version: '', rounds: [], steady: [] };
  try {
    const c = await clusterUp(runtime, env);
    try {
      run.version = runtime === 'containerd' ? await versionOf(join(c.binDir, 'containerd')) : '';
      kubernetesVersion ||= await versionOf(join(c.binDir, 'kubelet'));
      await c.api.call('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NAMESPACE } });
      await poll(`the default service account in ${NAMESPACE}`, 60_000, () =>
        c.api.call('GET', `/api/v1/namespaces/${NAMESPACE}/serviceaccounts/default`).then(() => true, () => undefined),
      );
      const image = c.images.PAUSE_IMAGE!;
      const cri = criClients(c.socket);
      await cri.image.pullImage(PullImageRequest.fromPartial({ image: { image } })).finally(() => cri.close());
      for (let r = 1; r <= ROUNDS; r++) {
        run.rounds.push(await round(c, r, image));
        if (r < ROUNDS) await removeDeployment(c, 'fill');
      }
      for (const evented of EVENTED) {
        if (evented) await restartKubelet(true);
        run.steady.push(await steady(c, evented, evented ? undefined : profileDir));
        if (evented) await restartKubelet(false);
      }
      await removeDeployment(c, 'fill');
      if (CHURN > 0) run.churn = await churn(c, image, probeFile);
    } finally {
      await c.api.close();
    }
  } finally {
    if (values.keep) {
      const dir = join(values.keep, runtime);
      await mkdir(dir, { recursive: true });
      await cp(join(CLUSTER_DIR, 'logs'), dir, { recursive: true }).catch(() => {});
    }
    process.stderr.write(`node-density-kubelet: cluster down (${runtime})\n`);
    await clusterDown();
    if (probeFile) await rm(probeFile, { force: true });
  }
  return run;
}

// --- The report -------------------------------------------------------------------------------------------------

const s = (v: number) => `${v.toFixed(2)} s`;

function report(runs: RuntimeRun[]): string {
  const stove = runs.find((r) => r.name === 'stove');
  const containerd = runs.find((r) => r.name === 'containerd');
  const ratio = (f: (r: RuntimeRun) => number) => {
    let v = NaN;
    try {
      if (stove && containerd) v = f(stove) / f(containerd);
    } catch {
      v = NaN;
    }
    return Number.isFinite(v) ? `${v.toFixed(2)}×` : '';
  };
  const cell = (r: RuntimeRun | undefined, show: (r: RuntimeRun) => string) => {
    if (!r) return '-';
    try {
      return show(r);
    } catch {
      return '-';
    }
  };
  const rows = [['', 'containerd', 'stove', 'stove/containerd']];
  const add = (label: string, show: (r: RuntimeRun) => string, value: (r: RuntimeRun) => number = () => NaN) => rows.push([label, cell(containerd, show), cell(stove, show), ratio(value)]);
  const med = (r: RuntimeRun, f: (x: Round) => number) => median(r.rounds.map(f));
  add(`**time to ${PODS} pods Ready** (median of rounds)`, (r) => ms(med(r, (x) => x.allReadyMs)), (r) => med(r, (x) => x.allReadyMs));
  add('  rounds', (r) => r.rounds.map((x) => ms(x.allReadyMs)).join(' / '));
  for (const q of [0.5, 0.9, 0.99]) {
    const f = (r: RuntimeRun) => med(r, (x) => quantile(x.sli, q));
    add(`${SLI} p${q * 100}`, (r) => s(f(r)), f);
  }
  // Where a pod's start goes: the kubelet's timing of each start call (mean, p90) and all of them summed
  // over the round (the calls overlap; the sum is the runtime's busy time as the kubelet sees it).
  for (const op of START_OPS) {
    const h = (x: Round) => x.ops.get(op)!;
    add(`  ${op} as the kubelet times it: mean / p90`, (r) => `${s(med(r, (x) => mean(h(x))))} / ${s(med(r, (x) => quantile(h(x), 0.9)))}`, (r) => med(r, (x) => mean(h(x))));
  }
  add('  start calls summed over the round', (r) => s(med(r, (x) => START_OPS.reduce((t, op) => t + (x.ops.get(op)?.sum ?? 0), 0))), (r) => med(r, (x) => START_OPS.reduce((t, op) => t + (x.ops.get(op)?.sum ?? 0), 0)));
  for (const st of EVENTED) {
    const of = (r: RuntimeRun) => r.steady.find((x) => x.evented === st)!;
    const tag = st ? ', EventedPLEG' : '';
    add(`daemon + helpers PSS, ${PODS} pods${tag}`, (r) => `${mib(of(r).daemonPss + of(r).helpersPss)} (${of(r).helpers} helpers)`, (r) => of(r).daemonPss + of(r).helpersPss);
    add(`  daemon RSS${tag}`, (r) => mib(of(r).daemonRss), (r) => of(r).daemonRss);
    add(`monitors PSS${tag}`, (r) => `${mib(of(r).monitorsPss)} (${of(r).monitors})`, (r) => of(r).monitorsPss);
    add(`**total memory**${tag}`, (r) => mib(of(r).daemonPss + of(r).helpersPss + of(r).monitorsPss), (r) => of(r).daemonPss + of(r).helpersPss + of(r).monitorsPss);
    add(`CPU while the kubelet polls, all processes${tag}`, (r) => `${median(of(r).windows.map((w) => w.all)).toFixed(1)} ms/s`, (r) => median(of(r).windows.map((w) => w.all)));
    add(`CPU while the kubelet polls, **the daemon alone**${tag}`, (r) => `${median(of(r).windows.map((w) => w.daemon)).toFixed(1)} ms/s`, (r) => median(of(r).windows.map((w) => w.daemon)));
    add(`  windows (daemon ms/s)`, (r) => of(r).windows.map((w) => w.daemon.toFixed(0)).join(' / '));
    add(`  load average at each window`, (r) => of(r).windows.map((w) => w.load.toFixed(1)).join(' / '));
    add(`  the kubelet's CRI calls per s${tag}`, (r) => [...of(r).callsPerS].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(', '));
  }
  if (CHURN > 0) {
    add(`churn: lifecycles through the kubelet`, (r) => `${r.churn!.lifecycles} in ${ms(r.churn!.ms)}`, (r) => r.churn!.ms / r.churn!.lifecycles);
    add('  daemon PSS before → after', (r) => `${mib(r.churn!.pssBefore)} → ${mib(r.churn!.pssAfter)}`, (r) => r.churn!.pssAfter / r.churn!.pssBefore);
    add(`  daemon PSS ${IDLE_AFTER_CHURN_MS / 1000} s later`, (r) => mib(r.churn!.pssIdle), (r) => r.churn!.pssIdle / r.churn!.pssBefore);
    add('  daemon RSS before → after', (r) => `${mib(r.churn!.rssBefore)} → ${mib(r.churn!.rssAfter)}`, (r) => r.churn!.rssAfter / r.churn!.rssBefore);
    add('  after a full GC (--gc-probe): live heap before → after', (r) => (r.churn!.gc ? `${mib(r.churn!.gc.before.heapUsed)} → ${mib(r.churn!.gc.after.heapUsed)}` : '-'));
    add('  after a full GC: committed heap before → after', (r) => (r.churn!.gc ? `${mib(r.churn!.gc.before.heapTotal)} → ${mib(r.churn!.gc.after.heapTotal)}` : '-'));
    add('  after a full GC: external (buffers) before → after', (r) => (r.churn!.gc ? `${mib(r.churn!.gc.before.external)} → ${mib(r.churn!.gc.after.external)}` : '-'));
    add('  after a full GC: daemon PSS before → after', (r) => (r.churn!.gc ? `${mib(r.churn!.gc.before.pss)} → ${mib(r.churn!.gc.after.pss)}` : '-'));
    add('  after a full GC: malloc main arena (brk) before → after', (r) => (r.churn!.gc ? `${mib(r.churn!.gc.before.brk)} → ${mib(r.churn!.gc.after.brk)}` : '-'));
    add('  after a full GC: other anonymous maps before → after', (r) => (r.churn!.gc ? `${mib(r.churn!.gc.before.anonMaps)} → ${mib(r.churn!.gc.after.anonMaps)}` : '-'));
    add('  after a full GC: V8 code range before → after', (r) => (r.churn!.gc ? `${mib(r.churn!.gc.before.codeRange)} → ${mib(r.churn!.gc.after.codeRange)}` : '-'));
    add('  after a full GC: file-backed before → after', (r) => (r.churn!.gc ? `${mib(r.churn!.gc.before.fileBacked)} → ${mib(r.churn!.gc.after.fileBacked)}` : '-'));
    add('  after a full GC: threads before → after', (r) => (r.churn!.gc ? `${r.churn!.gc.before.threads} → ${r.churn!.gc.after.threads}` : '-'));
    add('  left behind', (r) => (r.churn!.leftovers.length ? r.churn!.leftovers.join(', ') : 'nothing'));
  }
  const details = `${kubernetesVersion} single node, maxPods 110; ${PODS} pods of a pause container (CoreDNS counted), ${ROUNDS} rounds; steady ${STEADY_S} s in ${WINDOWS} windows; churn ${CHURN} lifecycles, ${CHURN_REPLICAS} replicas`;
  let out = heading('Node density under a kubelet', details, containerd?.version || undefined) + `${table(rows)}\n`;
  const prof = stove?.steady.find((x) => x.profile);
  if (prof?.profile) {
    const p = prof.profile;
    const calls = prof.profileCalls ?? new Map<string, number>();
    out += `\nStove's daemon, CPU profile over ${s(p.wallMs / 1000)} of the steady poll: ${ms(p.busyMs)} busy (${(p.busyMs / (p.wallMs / 1000)).toFixed(1)} ms/s); the kubelet's calls in it: ${[...calls].map(([k, v]) => `${k} ${v}`).join(', ')}\n\n`;
    const op: Record<string, string> = {
      'cri/list-pod-sandbox': 'list_podsandbox',
      'cri/list-containers': 'list_containers',
      'cri/list-container-stats': 'list_container_stats',
      'cri/list-pod-sandbox-stats': 'list_podsandbox_stats',
      'cri/container-status': 'container_status',
      'cri/pod-sandbox-status': 'podsandbox_status',
      'cri/container-stats': 'container_stats',
      'cri/pod-sandbox-stats': 'podsandbox_stats',
      'cri/get-container-events': 'get_container_events',
      'cri/image-fs-info': 'image_fs_info',
      'cri/version': 'version',
      'cri/status': 'status',
      'cri/list-images': 'list_images',
      'cri/image-status': 'image_status',
    };
    const partRows = [['part (samples with it on the stack)', 'ms', 'share', 'calls', 'ms per call']];
    for (const [part, v] of [...p.parts].sort((a, b) => b[1] - a[1]).slice(0, 20)) {
      const n = calls.get(op[part.replace(/\.ts$/, '')] ?? '') ?? 0;
      partRows.push([part, v.toFixed(0), `${((v / p.busyMs) * 100).toFixed(1)}%`, n ? String(n) : '', n ? (v / n).toFixed(3) : '']);
    }
    out += `${table(partRows)}\n\n`;
    const selfRows = [['function (self time)', 'ms', 'share']];
    for (const [f, v] of p.selfTop) selfRows.push([f.replace(/\|/g, '\\|'), v.toFixed(0), `${((v / p.busyMs) * 100).toFixed(1)}%`]);
    out += `${table(selfRows)}\n`;
  }
  return out;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root (up.sh starts a node)');
  const runtimes: ClusterRuntime[] = values.only ? [values.only as ClusterRuntime] : ['stove', 'containerd'];
  if (!runtimes.every((r) => r === 'stove' || r === 'containerd')) throw new Error(`--only is stove or containerd, not ${values.only}`);
  const runs: RuntimeRun[] = [];
  for (const runtime of runtimes) {
    runs.push(await runOn(runtime));
    // What is measured so far, should a later runtime's part fail or be cut short.
    if (runtime !== runtimes.at(-1)) process.stderr.write(report(runs));
  }
  process.stdout.write(report(runs));
}

runBench(main, clusterDown);
