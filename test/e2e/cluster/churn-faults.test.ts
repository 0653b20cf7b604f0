/**
 * Churn with faults: a Deployment of REPLICAS pods rolled out ROLLOUTS times, each rollout to a new
 * ReplicaSet (another image or another env value), while the node's runtime (Stove; containerd on a
 * CLUSTER_RUNTIME=containerd node, for comparison) and then the kubelet is killed with SIGKILL and
 * restarted at a random moment of each rollout: once pods of the new ReplicaSet are being created and
 * started and pods of the old one stopped. At the end every pod of the last ReplicaSet is Running and
 * Ready with its image, no container that ever ran was replaced (see below), the runtime runs one
 * container per pod and one sandbox per pod (none twice, none of an old ReplicaSet), and once the
 * Deployment is deleted nothing of it is left on the host: no sandbox or container in the runtime, no
 * monitor (conmon, shim), mount or network namespace beyond what was there before.
 *
 * A restart the kubelet makes by its own rules is allowed, and only that one: a CreateContainer or
 * StartContainer whose answer was lost (the kubelet or the runtime killed meanwhile) leaves a container
 * the kubelet finds CREATED on its next sync, and it then always creates a new one in its place
 * (`ShouldContainerBeRestarted`: "always restart container in the unknown, or in the created state"),
 * as attempt 1: restartCount 1 without anything having run. Such a restart is recognised by the
 * replaced attempt, still in the runtime (the kubelet keeps one dead container per container): never
 * started. A restarted pod without it failed the test — for Stove, a log file left by a create
 * interrupted before its record was written made the kubelet count a restart
 * (`calcRestartCountByLogDir`: no container in the runtime, so the restart count is the highest
 * `<n>.log` in the container's log dir plus one).
 * On failure, or when the kubelet restarted containers, the kubelet's and the runtime's logs and what
 * the test found go to /var/tmp/stove-e2e/churn-<runtime>-<victim>-<time>/.
 */
import { strict as assert } from 'node:assert';
import { copyFile, mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ContainerState, ListContainersRequest, ListPodSandboxRequest, PodSandboxState } from '../../../src/gen/runtime/v1/api.js';
import { criClients } from '../../helpers/cri-client.js';
import {
  CLUSTER_DIR,
  apply,
  criSocket,
  image,
  isReady,
  kubectl,
  nodeRuntime,
  podsWithLabel,
  restartOnNode,
  suiteNamespace,
  waitFor,
  type NodeRuntime,
  type PodJson,
} from './kube.js';

const REPLICAS = Number(process.env.CHURN_REPLICAS ?? 30);
const ROLLOUTS = 5;
const REPORTS = '/var/tmp/stove-e2e';

function deployment(namespace: string, rollout: number): string {
  const img = image(rollout % 2 === 0 ? 'BUSYBOX_IMAGE' : 'BUSYBOX2_IMAGE');
  return `apiVersion: apps/v1
kind: Deployment
metadata: {name: churn, namespace: ${namespace}}
spec:
  replicas: ${REPLICAS}
  selector: {matchLabels: {app: churn}}
  strategy: {rollingUpdate: {maxSurge: 25%, maxUnavailable: 25%}}
  template:
    metadata: {labels: {app: churn}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: ${img}
        command: [sh, -c, "exec sleep 3600"]
        env: [{name: ROLLOUT, value: "${rollout}"}]
`;
}

const imageOf = (rollout: number) => image(rollout % 2 === 0 ? 'BUSYBOX_IMAGE' : 'BUSYBOX2_IMAGE');

/** Where the runtime keeps what it mounts (and, for Stove, its pinned network namespaces). */
const runtimeDir = (runtime: NodeRuntime) => join(CLUSTER_DIR, runtime);

/** What the runtime keeps on the host: monitors (conmons; containerd's shims), mounts under its dir, Stove's pinned network namespaces. */
async function hostFootprint(runtime: NodeRuntime): Promise<{ monitors: number; mounts: number; netns: number }> {
  const dir = runtimeDir(runtime);
  let monitors = 0;
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const argv = (await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '')).split('\0');
    const monitor = runtime === 'stove' ? argv[0]?.endsWith('conmon') : argv[0]?.endsWith('containerd-shim-runc-v2');
    if (monitor && argv.some((a) => a.startsWith(dir + '/'))) monitors++;
  }
  const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
  const mounts = mountinfo.split('\n').filter((l) => l.split(' ')[4]?.startsWith(dir + '/')).length;
  const netns = runtime === 'stove' ? (await readdir(join(dir, 'state/netns')).catch(() => [])).length : 0;
  return { monitors, mounts, netns };
}

interface RuntimeContainer {
  id: string;
  podUid: string;
  attempt: number;
  state: ContainerState;
  startedAt: bigint;
}

/** The namespace's pod sandboxes and containers (every state) as the runtime has them, through its CRI. */
async function runtimeView(namespace: string): Promise<{ sandboxes: { uid: string; ready: boolean }[]; containers: RuntimeContainer[] }> {
  const cri = criClients(criSocket());
  try {
    const label = { 'io.kubernetes.pod.namespace': namespace };
    const pods = await cri.runtime.listPodSandbox(ListPodSandboxRequest.fromPartial({ filter: { labelSelector: label } }));
    const ctrs = await cri.runtime.listContainers(ListContainersRequest.fromPartial({ filter: { labelSelector: label } }));
    const containers: RuntimeContainer[] = [];
    for (const c of ctrs.containers) {
      // Only a container that is not running needs its start time: did it ever run?
      const startedAt = c.state === ContainerState.CONTAINER_RUNNING ? 1n : ((await cri.runtime.containerStatus({ containerId: c.id, verbose: false }).catch(() => undefined))?.status?.startedAt ?? -1n);
      containers.push({ id: c.id, podUid: c.labels['io.kubernetes.pod.uid'] ?? '', attempt: c.metadata?.attempt ?? 0, state: c.state, startedAt });
    }
    return {
      sandboxes: pods.items.map((p) => ({ uid: p.metadata!.uid, ready: p.state === PodSandboxState.SANDBOX_READY })),
      containers,
    };
  } finally {
    cri.close();
  }
}

/** Lines of a log file that name any of `needles` (the last `max`). */
async function linesNaming(path: string, needles: string[], max = 40): Promise<string[]> {
  const text = await readFile(path, 'utf8').catch(() => '');
  return text.split('\n').filter((l) => needles.some((n) => l.includes(n))).slice(-max);
}

const random = (min: number, max: number) => min + Math.random() * (max - min);

/** What the test found about each restarted pod, and why the kubelet restarted it. */
interface Restart {
  pod: string;
  uid: string;
  restartCount: number;
  /** The pod's containers in the runtime, every attempt. */
  containers: { id: string; attempt: number; state: string; startedAt: string }[];
  /** The replaced attempt is in the runtime and never ran (the kubelet's rule for a CREATED container). */
  replacedNeverRan: boolean;
}

/** Each restarted pod of `pods` with the runtime's containers of it. */
function restartsOf(pods: PodJson[], containers: RuntimeContainer[]): Restart[] {
  return pods
    .filter((p) => p.status.containerStatuses![0]!.restartCount > 0)
    .map((p) => {
      const restartCount = p.status.containerStatuses![0]!.restartCount;
      const mine = containers.filter((c) => c.podUid === p.metadata.uid).sort((a, b) => a.attempt - b.attempt);
      const replaced = mine.find((c) => c.attempt === restartCount - 1);
      return {
        pod: p.metadata.name,
        uid: p.metadata.uid,
        restartCount,
        containers: mine.map((c) => ({ id: c.id.slice(0, 13), attempt: c.attempt, state: ContainerState[c.state] ?? String(c.state), startedAt: String(c.startedAt) })),
        replacedNeverRan: replaced !== undefined && replaced.state !== ContainerState.CONTAINER_RUNNING && replaced.startedAt === 0n,
      };
    });
}

describe(`cluster: rollouts while ${process.env.CLUSTER_RUNTIME || 'stove'} or the kubelet is killed`, function () {
  this.timeout(30 * 60_000);
  const ns = suiteNamespace('e2e-churn');
  let runtime: NodeRuntime;
  let baseline: Awaited<ReturnType<typeof hostFootprint>>;

  before(async () => {
    runtime = nodeRuntime();
    baseline = await hostFootprint(runtime);
  });

  /**
   * Waits until the rollout has pods of the new template starting and pods of an old one stopping,
   * then a random 0–2 s more, and kills `victim` with SIGKILL and restarts it.
   */
  async function killMidRollout(victim: 'kubelet' | NodeRuntime, rollout: number): Promise<string> {
    const seen = await waitFor(`rollout ${rollout}: new pods starting and old ones stopping`, 180_000, async () => {
      const pods = await podsWithLabel(ns.name, 'app=churn');
      const starting = pods.filter((p) => !('deletionTimestamp' in p.metadata) && !isReady(p)).length;
      const stopping = pods.filter((p) => 'deletionTimestamp' in p.metadata).length;
      return starting > 0 && stopping > 0 ? `${starting} starting, ${stopping} stopping` : undefined;
    });
    await new Promise((resolve) => setTimeout(resolve, random(0, 2000)));
    const at = new Date().toISOString();
    await restartOnNode(victim, 'KILL');
    return `${at} (${seen})`;
  }

  /** Every pod of the last ReplicaSet Running and Ready with `img`; no other pod of the Deployment. */
  async function settled(rollout: number): Promise<PodJson[]> {
    await kubectl(['-n', ns.name, 'rollout', 'status', 'deployment/churn', '--timeout=600s'], { timeoutMs: 610_000 });
    return waitFor(`the ${REPLICAS} pods of rollout ${rollout} alone`, 300_000, async () => {
      const pods = await podsWithLabel(ns.name, 'app=churn');
      const ok = pods.every(
        (p) =>
          !('deletionTimestamp' in p.metadata) &&
          p.status.phase === 'Running' &&
          isReady(p) &&
          p.status.containerStatuses?.[0]?.image === imageOf(rollout) &&
          p.metadata.labels?.['pod-template-hash'] === pods[0]!.metadata.labels?.['pod-template-hash'],
      );
      return pods.length === REPLICAS && ok ? pods : undefined;
    });
  }

  /** The kubelet's and the runtime's logs and `found` in a report dir; returns its path. */
  async function keepReport(victim: string, found: unknown): Promise<string> {
    const dir = join(REPORTS, `churn-${runtime}-${victim}-${new Date().toISOString().replace(/[-:]/g, '').slice(0, 15)}Z`);
    await mkdir(dir, { recursive: true });
    for (const name of ['kubelet', runtime]) await copyFile(join(CLUSTER_DIR, 'logs', `${name}.log`), join(dir, `${name}.log`)).catch(() => {});
    await writeFile(join(dir, 'found.json'), JSON.stringify(found, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v), 2));
    return dir;
  }

  async function churnWithFaults(victim: 'kubelet' | NodeRuntime): Promise<void> {
    const started = performance.now();
    const kills: string[] = [];
    let restarts: Restart[] = [];
    let ok = false;
    try {
      await apply(deployment(ns.name, 0));
      await settled(0);
      for (let rollout = 1; rollout <= ROLLOUTS; rollout++) {
        await apply(deployment(ns.name, rollout));
        kills.push(await killMidRollout(victim, rollout));
      }
      const pods = await settled(ROLLOUTS);
      const hash = pods[0]!.metadata.labels!['pod-template-hash']!;
      const rs = await kubectl(['-n', ns.name, 'get', 'rs', '-l', 'app=churn', '-o', 'jsonpath={range .items[*]}{.metadata.labels.pod-template-hash}={.status.replicas} {end}']);
      for (const entry of rs.trim().split(' ')) {
        const [h, n] = entry.split('=');
        assert.equal(Number(n), h === hash ? REPLICAS : 0, `ReplicaSet ${h}: ${n} replicas`);
      }

      // Through the runtime's CRI: one ready sandbox and one running container per pod, none of an old pod.
      const uids = new Set(pods.map((p) => p.metadata.uid));
      const view = await waitFor(`${runtime} to hold only the last ReplicaSet's pods`, 180_000, async () => {
        const v = await runtimeView(ns.name);
        return v.sandboxes.length === REPLICAS && v.containers.filter((c) => c.state === ContainerState.CONTAINER_RUNNING).length === REPLICAS ? v : undefined;
      }).catch(async () => runtimeView(ns.name));

      // No container that ran was replaced: a restarted pod's replaced attempt is in the runtime and never started.
      restarts = restartsOf(pods, view.containers);
      const unexplained = restarts.filter((r) => !r.replacedNeverRan);
      assert.deepEqual(unexplained, [], 'pods restarted where the replaced container had run, or is not in the runtime');

      const ready = view.sandboxes.filter((s) => s.ready);
      assert.deepEqual(new Set(ready.map((s) => s.uid)), uids, 'one ready sandbox per pod of the last ReplicaSet');
      assert.equal(ready.length, REPLICAS, 'no pod has two ready sandboxes');
      const running = view.containers.filter((c) => c.state === ContainerState.CONTAINER_RUNNING);
      assert.equal(running.length, REPLICAS, 'one running container per pod');
      assert.deepEqual(new Set(running.map((c) => c.podUid)), uids, 'no container runs twice, none of an old pod');
      assert.equal(view.sandboxes.length, REPLICAS, `sandboxes of old pods left: ${view.sandboxes.length - REPLICAS}`);

      await kubectl(['-n', ns.name, 'delete', 'deployment', 'churn', '--wait=true'], { timeoutMs: 120_000 });
      await waitFor('no churn pods', 300_000, async () => (await podsWithLabel(ns.name, 'app=churn')).length === 0);
      await waitFor(`nothing of the Deployment in ${runtime}`, 120_000, async () => {
        const v = await runtimeView(ns.name);
        return v.sandboxes.length === 0 && v.containers.length === 0;
      });
      const left = await waitFor('the host as before', 120_000, async () => {
        const now = await hostFootprint(runtime);
        return now.monitors <= baseline.monitors && now.mounts <= baseline.mounts && now.netns <= baseline.netns ? now : undefined;
      }).catch(() => hostFootprint(runtime));
      assert.ok(left.monitors <= baseline.monitors && left.mounts <= baseline.mounts && left.netns <= baseline.netns, `left behind: ${JSON.stringify({ baseline, now: left })}`);
      ok = true;
    } finally {
      const summary = `${victim} killed ${kills.length} times; ${restarts.length} pods restarted by the kubelet, each replacing a container that never started; ${((performance.now() - started) / 1000).toFixed(0)} s`;
      if (!ok || restarts.length > 0) {
        const kubeletLines = await linesNaming(join(CLUSTER_DIR, 'logs/kubelet.log'), restarts.map((r) => r.pod));
        const dir = await keepReport(victim, { ok, kills, restarts, kubeletLines });
        console.log(`      ${summary}${ok ? '' : ' (failed)'}; kills at ${kills.join('; ')}; report: ${dir}`);
      } else console.log(`      ${summary}`);
    }
  }

  it(`rolls a Deployment of ${REPLICAS} pods out ${ROLLOUTS} times while the runtime is killed (SIGKILL) mid-rollout each time`, async () => {
    await churnWithFaults(runtime);
  });

  it(`rolls a Deployment of ${REPLICAS} pods out ${ROLLOUTS} times while the kubelet is killed (SIGKILL) mid-rollout each time`, async () => {
    await churnWithFaults('kubelet');
  });
});
