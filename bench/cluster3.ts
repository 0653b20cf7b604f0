/**
 * The three-node kubeadm cluster of test/e2e/cluster/multi/ on Stove, then on containerd 2.x
 * (CLUSTER_RUNTIME=containerd), side by side in one run.
 *
 *   node dist/bench/cluster3.js [--rounds 3] [--replicas 6] [--rest-seconds 30] [--only stove|containerd]
 *
 * Holds /run/lock/stove-cluster3.lock for the whole run (it runs itself again under flock(1) when it
 * does not hold it yet). A round: multi/up.sh (which exits once CoreDNS, Flannel and metrics-server
 * run), a Deployment of `replicas` busybox pods applied then, its rollout awaited, `rest-seconds` of
 * rest, the runtimes' memory on every node, multi/down.sh (also when the round fails or the script is
 * interrupted). Per round it records:
 *   - from `kubeadm init` starting (up.sh writes the time) to 3 nodes Ready: the latest of the nodes'
 *     Ready conditions' lastTransitionTime (whole seconds, as the kubelets post them);
 *   - from `kubeadm init` to up.sh done (the cluster with its add-ons), and to all the Deployment's pods
 *     Ready (the rollout's end as `kubectl rollout status` saw it on its watch); the busybox image is
 *     pulled by the first pod on each worker, as on a new cluster;
 *   - per node, the PSS (`/proc/<pid>/smaps_rollup`) of the runtime daemon, of its helpers (its
 *     descendants other than monitors: Stove's spawn and mount helpers) and of its monitors (Stove: a
 *     conmon per container and per pod; containerd: a `containerd-shim-runc-v2` per pod), the daemon's
 *     RSS, and the load average when they were read.
 * It prints the medians of the rounds per runtime, then every round's figures.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { mib, pidsWhere, runtimeMemory, type RuntimeMemory } from './lib/processes.js';
import { benchOptions, heading, runBench } from './lib/run.js';
import { median, table } from './lib/stats.js';

const USAGE = 'node dist/bench/cluster3.js [--rounds 3] [--replicas 6] [--rest-seconds 30] [--only stove|containerd]';
const values = benchOptions(USAGE, {
  rounds: { type: 'string', default: '3' },
  replicas: { type: 'string', default: '6' },
  'rest-seconds': { type: 'string', default: '30' },
  only: { type: 'string' },
});
const ROUNDS = Number(values.rounds);
const REPLICAS = Number(values.replicas);
const REST_MS = Number(values['rest-seconds']) * 1000;
const LOCK = '/run/lock/stove-cluster3.lock';
const LOCK_HELD = 'STOVE_CLUSTER3_LOCK_HELD';
const SCRIPTS = resolve(import.meta.dirname, '../../test/e2e/cluster/multi');
const W = process.env.CLUSTER_DIR ?? '/var/lib/stove-cluster3';
const NODES = ['cp-1', 'worker-1', 'worker-2'] as const;
const NAMESPACE = 'bench';

/** `v1.36.x`, from the first cluster's kubelet. */
let kubernetes = '';

type Runtime = 'stove' | 'containerd';
const RUNTIMES: Runtime[] = values.only ? [values.only as Runtime] : ['stove', 'containerd'];
if (!RUNTIMES.every((r) => r === 'stove' || r === 'containerd') || !(ROUNDS >= 1) || !(REPLICAS >= 1) || !(REST_MS >= 0)) {
  process.stderr.write(`usage: ${USAGE}\n`);
  process.exit(2);
}

interface Round {
  runtime: Runtime;
  /** Seconds from kubeadm init starting. */
  nodesReady: number;
  upDone: number;
  podsReady: number;
  /** Seconds from the Deployment's apply to its pods Ready. */
  rollout: number;
  memory: Record<string, RuntimeMemory>;
  loadAtStart: number;
  loadAtMemory: number;
  version: string;
}

/** A script of multi/'s, in a process group of its own (a ^C reaches the bench, which stops it). */
let running: ReturnType<typeof spawn> | undefined;
function script(name: string, env: Record<string, string>): Promise<number | null> {
  return new Promise((done, fail) => {
    const child = spawn(join(SCRIPTS, name), { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'inherit'], detached: true });
    running = child;
    child.once('error', fail);
    child.once('exit', (code) => {
      running = undefined;
      done(code);
    });
  });
}

async function clusterDown(): Promise<void> {
  if (running) {
    const child = running;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM'); // up.sh removes what it made
    await exited;
  }
  const code = await script('down.sh', {});
  if (code !== 0) throw new Error(`multi/down.sh failed with exit ${code}`);
}

function kubectl(args: string[], input?: string): string {
  const bin = join(readFileSync(join(W, 'bin-dir'), 'utf8').trim(), 'kubectl');
  const r = spawnSync(bin, ['--kubeconfig', join(W, 'admin.kubeconfig'), ...args], { input, encoding: 'utf8', timeout: 900_000 });
  if (r.status !== 0) throw new Error(`kubectl ${args.join(' ')}: exit ${r.status}: ${r.stderr}`);
  return r.stdout;
}

function deployment(image: string): string {
  return `apiVersion: apps/v1
kind: Deployment
metadata: {name: six, namespace: ${NAMESPACE}}
spec:
  replicas: ${REPLICAS}
  selector: {matchLabels: {app: six}}
  template:
    metadata: {labels: {app: six}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: main, image: ${image}, command: [sleep, "100000"], resources: {requests: {cpu: 10m, memory: 16Mi}}}
`;
}

/** The runtime's processes on `node`: the daemon, its helpers and its monitors, found by the node's dir in their command lines. */
async function nodeMemory(runtime: Runtime, node: string): Promise<RuntimeMemory> {
  const daemon = Number(readFileSync(join(W, 'pids', `${runtime}-${node}`), 'utf8'));
  const dir = `${join(W, 'nodes', node)}/`;
  const monitorExe = runtime === 'stove' ? 'conmon' : 'containerd-shim-runc-v2';
  const monitors = await pidsWhere((a) => a[0]!.endsWith(monitorExe) && a.some((x) => x.startsWith(dir)));
  const memory = await runtimeMemory(daemon, monitors);
  if (!memory.daemonRss) throw new Error(`the ${runtime} of ${node} (pid ${daemon}) is gone`);
  return memory;
}

async function round(runtime: Runtime): Promise<Round> {
  if (existsSync(join(W, 'up'))) throw new Error(`a three-node cluster is up in ${W} already: remove it with ${SCRIPTS}/down.sh first`);
  const loadAtStart = loadavg()[0]!;
  const code = await script('up.sh', { CLUSTER_RUNTIME: runtime });
  const upEnd = Date.now() / 1000;
  if (code !== 0) throw new Error(`multi/up.sh (CLUSTER_RUNTIME=${runtime}) failed with exit ${code}`);
  const initStart = Number(readFileSync(join(W, 'kubeadm-init-started'), 'utf8'));
  const nodes = JSON.parse(kubectl(['get', 'nodes', '-o', 'json'])) as {
    items: { status: { conditions: { type: string; status: string; lastTransitionTime: string }[]; nodeInfo: { containerRuntimeVersion: string } } }[];
  };
  const readyAt = nodes.items.map((n) => {
    const c = n.status.conditions.find((x) => x.type === 'Ready' && x.status === 'True');
    if (!c) throw new Error('a node is not Ready after up.sh');
    return Date.parse(c.lastTransitionTime) / 1000;
  });
  kubernetes ||= spawnSync(join(readFileSync(join(W, 'bin-dir'), 'utf8').trim(), 'kubelet'), ['--version'], { encoding: 'utf8' }).stdout.trim().replace(/^Kubernetes /, '');
  const images = readFileSync(join(W, 'images.env'), 'utf8');
  const busybox = /^BUSYBOX_IMAGE=(.+)$/m.exec(images)?.[1];
  if (!busybox) throw new Error('no BUSYBOX_IMAGE in images.env');
  kubectl(['create', 'namespace', NAMESPACE]);
  const applied = Date.now() / 1000;
  kubectl(['apply', '-f', '-'], deployment(busybox));
  kubectl(['-n', NAMESPACE, 'rollout', 'status', 'deployment/six', '--timeout=600s']);
  const ready = Date.now() / 1000;
  process.stderr.write(`cluster3: ${runtime}: ${REPLICAS} pods Ready ${(ready - applied).toFixed(1)} s after the apply; resting ${REST_MS / 1000} s\n`);
  await sleep(REST_MS); // "at rest": the rollout's pulls and starts settled
  const memory: Record<string, RuntimeMemory> = {};
  for (const node of NODES) memory[node] = await nodeMemory(runtime, node);
  const loadAtMemory = loadavg()[0]!;
  await clusterDown();
  return {
    runtime,
    nodesReady: Math.max(...readyAt) - initStart,
    upDone: upEnd - initStart,
    podsReady: ready - initStart,
    rollout: ready - applied,
    memory,
    loadAtStart,
    loadAtMemory,
    version: nodes.items[0]!.status.nodeInfo.containerRuntimeVersion,
  };
}

const s = (x: number) => `${x.toFixed(1)} s`;
const total = (m: RuntimeMemory) => m.daemonPss + m.helpersPss + m.monitorsPss;

function report(rounds: Round[]): string {
  const ran = RUNTIMES.filter((r) => rounds.some((x) => x.runtime === r));
  const of = (r: Runtime) => rounds.filter((x) => x.runtime === r);
  const versions = ran.map((r) => of(r)[0]!.version).join(', ');
  let out = heading('Three-node kubeadm cluster, Stove vs containerd', `${ROUNDS} rounds per runtime, medians; ${REPLICAS} replicas; Kubernetes ${kubernetes}`, versions);
  const times: [string, (x: Round) => number][] = [
    ['kubeadm init → 3 nodes Ready', (x) => x.nodesReady],
    ['kubeadm init → up.sh done (CoreDNS, Flannel, metrics-server)', (x) => x.upDone],
    [`kubeadm init → ${REPLICAS} pods Ready (applied after up.sh)`, (x) => x.podsReady],
    [`apply → ${REPLICAS} pods Ready`, (x) => x.rollout],
  ];
  const ratio = (f: (x: Round) => number) => (ran.length === 2 ? `${(median(of('stove').map(f)) / median(of('containerd').map(f))).toFixed(2)}×` : '-');
  out += table([['', ...ran, 'stove/containerd'], ...times.map(([label, f]) => [label, ...ran.map((r) => s(median(of(r).map(f)))), ratio(f)])]);
  out += `\n\nThe runtime's memory on each node at rest with the ${REPLICAS} pods (PSS, medians of the rounds; monitors: Stove's conmons, containerd's shims):\n\n`;
  const rows = [['node', ...ran.flatMap((r) => [`${r} total`, `${r} daemon / helpers / monitors (n)`]), 'stove/containerd']];
  for (const node of NODES) {
    const cell = (r: Runtime) => {
      const ms = of(r).map((x) => x.memory[node]!);
      const m = (f: (x: RuntimeMemory) => number) => median(ms.map(f));
      return [mib(m(total)), `${mib(m((x) => x.daemonPss))} / ${mib(m((x) => x.helpersPss))} / ${mib(m((x) => x.monitorsPss))} (${m((x) => x.monitors)})`];
    };
    const r = ran.length === 2 ? `${(median(of('stove').map((x) => total(x.memory[node]!))) / median(of('containerd').map((x) => total(x.memory[node]!)))).toFixed(2)}×` : '-';
    rows.push([node, ...ran.flatMap(cell), r]);
  }
  out += table(rows);
  out += '\n\nEvery round (memory: the three nodes summed; load: 1-minute load average at the round\'s start / when the memory was read):\n\n';
  out += table([
    ['runtime', 'round', '→ 3 Ready', '→ up.sh done', `→ ${REPLICAS} pods Ready`, 'apply → Ready', 'memory PSS', 'daemons RSS', 'load'],
    ...rounds.map((x) => [
      x.runtime,
      String(of(x.runtime).indexOf(x) + 1),
      s(x.nodesReady),
      s(x.upDone),
      s(x.podsReady),
      s(x.rollout),
      mib(NODES.reduce((n, node) => n + total(x.memory[node]!), 0)),
      mib(NODES.reduce((n, node) => n + x.memory[node]!.daemonRss, 0)),
      `${x.loadAtStart.toFixed(1)} / ${x.loadAtMemory.toFixed(1)}`,
    ]),
  ]);
  return `${out}\n`;
}

async function main(): Promise<void> {
  const rounds: Round[] = [];
  try {
    for (const runtime of RUNTIMES) {
      for (let i = 0; i < ROUNDS; i++) {
        process.stderr.write(`cluster3: ${runtime}, round ${i + 1} of ${ROUNDS}\n`);
        rounds.push(await round(runtime));
      }
    }
  } catch (err) {
    await clusterDown(); // a round that failed leaves its cluster up
    throw err;
  }
  process.stdout.write(report(rounds));
}

if (process.env[LOCK_HELD] !== '1') {
  // The three-node cluster exists once on a machine: whoever uses it holds the lock all along.
  const r = spawnSync('flock', ['-w', '5400', LOCK, process.execPath, ...process.execArgv, ...process.argv.slice(1)], { stdio: 'inherit', env: { ...process.env, [LOCK_HELD]: '1' } });
  process.exit(r.status ?? 1);
} else {
  runBench(main, clusterDown);
}
