/**
 * Churn with faults: a Deployment of REPLICAS pods rolled out ROLLOUTS times, each rollout to a new
 * ReplicaSet (another image or another env value), while Stove (then the kubelet) is killed with
 * SIGKILL and restarted at a random moment of each rollout: once pods of the new ReplicaSet are being
 * created and started and pods of the old one stopped. At the end every pod of the last ReplicaSet is
 * Running and Ready with its image (none restarted when Stove was killed; when the kubelet was, at most
 * one per kill, see below), the runtime runs one container per pod and one sandbox per pod
 * (none twice, none of an old ReplicaSet), and once the Deployment is deleted nothing of it is left on
 * the host: no sandbox or container in the runtime, no conmon, mount or network namespace beyond what
 * was there before.
 */
import { strict as assert } from 'node:assert';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { ContainerState, ListContainersRequest, ListPodSandboxRequest, PodSandboxState } from '../../../src/gen/runtime/v1/api.js';
import { criClients } from '../../helpers/cri-client.js';
import { CLUSTER_DIR, apply, image, isReady, kubectl, podsWithLabel, restartOnNode, suiteNamespace, waitFor, type PodJson } from './kube.js';

const REPLICAS = Number(process.env.CHURN_REPLICAS ?? 30);
const ROLLOUTS = 5;
const STOVE_DIR = join(CLUSTER_DIR, 'stove');

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

/** What the runtime keeps on the host: conmons, mounts under Stove's dirs, pinned network namespaces. */
async function hostFootprint(): Promise<{ conmons: number; mounts: number; netns: number }> {
  let conmons = 0;
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const argv = (await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '')).split('\0');
    if (argv[0]?.endsWith('conmon') && argv.some((a) => a.startsWith(STOVE_DIR + '/'))) conmons++;
  }
  const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
  const mounts = mountinfo.split('\n').filter((l) => l.split(' ')[4]?.startsWith(STOVE_DIR + '/')).length;
  const netns = (await readdir(join(STOVE_DIR, 'state/netns')).catch(() => [])).length;
  return { conmons, mounts, netns };
}

/** The namespace's pod sandboxes and containers as Stove has them (state ready / running). */
async function runtimeView(namespace: string): Promise<{ sandboxes: { uid: string; ready: boolean }[]; containers: { podUid: string; running: boolean }[] }> {
  const cri = criClients(join(STOVE_DIR, 'stove.sock'));
  try {
    const label = { 'io.kubernetes.pod.namespace': namespace };
    const pods = await cri.runtime.listPodSandbox(ListPodSandboxRequest.fromPartial({ filter: { labelSelector: label } }));
    const ctrs = await cri.runtime.listContainers(ListContainersRequest.fromPartial({ filter: { labelSelector: label } }));
    return {
      sandboxes: pods.items.map((p) => ({ uid: p.metadata!.uid, ready: p.state === PodSandboxState.SANDBOX_READY })),
      containers: ctrs.containers.map((c) => ({ podUid: c.labels['io.kubernetes.pod.uid'] ?? '', running: c.state === ContainerState.CONTAINER_RUNNING })),
    };
  } finally {
    cri.close();
  }
}

const random = (min: number, max: number) => min + Math.random() * (max - min);

describe('cluster: rollouts while Stove or the kubelet is killed', function () {
  this.timeout(30 * 60_000);
  const ns = suiteNamespace('e2e-churn');
  let baseline: Awaited<ReturnType<typeof hostFootprint>>;

  before(async () => {
    baseline = await hostFootprint();
  });

  /**
   * Waits until the rollout has pods of the new template starting and pods of an old one stopping,
   * then a random 0–2 s more, and kills `victim` with SIGKILL and restarts it.
   */
  async function killMidRollout(victim: 'stove' | 'kubelet', rollout: number): Promise<string> {
    const seen = await waitFor(`rollout ${rollout}: new pods starting and old ones stopping`, 180_000, async () => {
      const pods = await podsWithLabel(ns.name, 'app=churn');
      const starting = pods.filter((p) => !('deletionTimestamp' in p.metadata) && !isReady(p)).length;
      const stopping = pods.filter((p) => 'deletionTimestamp' in p.metadata).length;
      return starting > 0 && stopping > 0 ? `${starting} starting, ${stopping} stopping` : undefined;
    });
    await new Promise((resolve) => setTimeout(resolve, random(0, 2000)));
    await restartOnNode(victim, 'KILL');
    return seen;
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

  async function churnWithFaults(victim: 'stove' | 'kubelet'): Promise<void> {
    const started = performance.now();
    await apply(deployment(ns.name, 0));
    await settled(0);
    const kills: string[] = [];
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
    // Stove keeps its containers across a crash: none restarts. A kubelet killed between CreateContainer
    // and StartContainer finds, once restarted, a container it created and never started, and starts
    // a new one in its place (restartCount 1; the kubelet's rule, whatever the runtime): at most one
    // such pod per kill, and still one running container per pod (checked through the CRI below).
    const restarted = pods.filter((p) => p.status.containerStatuses![0]!.restartCount > 0);
    if (victim === 'stove') assert.deepEqual(restarted.map((p) => p.metadata.name), [], 'containers restarted');
    else {
      assert.ok(restarted.length <= kills.length, `${restarted.length} pods restarted after ${kills.length} kills`);
      for (const p of restarted) assert.equal(p.status.containerStatuses![0]!.restartCount, 1, `${p.metadata.name} restarted more than once`);
    }

    // Through Stove's CRI: one ready sandbox and one running container per pod, none of an old pod.
    const uids = new Set(pods.map((p) => p.metadata.uid));
    const view = await waitFor('Stove to hold only the last ReplicaSet\'s pods', 180_000, async () => {
      const v = await runtimeView(ns.name);
      return v.sandboxes.length === REPLICAS && v.containers.length === REPLICAS ? v : undefined;
    }).catch(async () => runtimeView(ns.name));
    const ready = view.sandboxes.filter((s) => s.ready);
    assert.deepEqual(new Set(ready.map((s) => s.uid)), uids, 'one ready sandbox per pod of the last ReplicaSet');
    assert.equal(ready.length, REPLICAS, 'no pod has two ready sandboxes');
    const running = view.containers.filter((c) => c.running);
    assert.equal(running.length, REPLICAS, 'one running container per pod');
    assert.deepEqual(new Set(running.map((c) => c.podUid)), uids, 'no container runs twice, none of an old pod');
    assert.equal(view.sandboxes.length, REPLICAS, `sandboxes of old pods left: ${view.sandboxes.length - REPLICAS}`);

    await kubectl(['-n', ns.name, 'delete', 'deployment', 'churn', '--wait=true'], { timeoutMs: 120_000 });
    await waitFor('no churn pods', 300_000, async () => (await podsWithLabel(ns.name, 'app=churn')).length === 0);
    await waitFor('nothing of the Deployment in Stove', 120_000, async () => {
      const v = await runtimeView(ns.name);
      return v.sandboxes.length === 0 && v.containers.length === 0;
    });
    const left = await waitFor('the host as before', 120_000, async () => {
      const now = await hostFootprint();
      return now.conmons <= baseline.conmons && now.mounts <= baseline.mounts && now.netns <= baseline.netns ? now : undefined;
    }).catch(hostFootprint);
    assert.ok(left.conmons <= baseline.conmons && left.mounts <= baseline.mounts && left.netns <= baseline.netns, `left behind: ${JSON.stringify({ baseline, now: left })}`);
    console.log(`      ${victim} killed ${kills.length} times (at: ${kills.join('; ')}); ${restarted.length} pods restarted; ${((performance.now() - started) / 1000).toFixed(0)} s`);
  }

  it(`rolls a Deployment of ${REPLICAS} pods out ${ROLLOUTS} times while Stove is killed (SIGKILL) mid-rollout each time`, async () => {
    await churnWithFaults('stove');
  });

  it(`rolls a Deployment of ${REPLICAS} pods out ${ROLLOUTS} times while the kubelet is killed (SIGKILL) mid-rollout each time`, async () => {
    await churnWithFaults('kubelet');
  });
});
