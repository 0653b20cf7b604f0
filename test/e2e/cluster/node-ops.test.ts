/** What an operator does to a node: cordon and drain, restarts of the kubelet and of Stove, image GC. */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { execa } from 'execa';
import { CLUSTER_SCRIPTS, NODE_NAME, apply, busyboxDeployment, busyboxPod, getJson, image, isReady, kubectl, podsWithLabel, suiteNamespace, waitFor, waitPodReady, type PodJson } from './kube.js';


async function restart(name: string, signal = 'TERM', env: Record<string, string> = {}): Promise<void> {
  const result = await execa(join(CLUSTER_SCRIPTS, 'restart.sh'), [name, signal], { reject: false, all: true, env });
  if (result.exitCode !== 0) throw new Error(`restart.sh ${name} ${signal}: ${result.all}`);
}

async function nodeReady(): Promise<boolean> {
  const node = await getJson<{ status: { conditions: { type: string; status: string }[] } }>(['node', NODE_NAME]);
  return node.status.conditions.some((c) => c.type === 'Ready' && c.status === 'True');
}

/** Container IDs and restart counts: what must not change when only the node's daemons restart. */
const fingerprint = (pods: PodJson[]) =>
  pods
    .map((p) => `${p.metadata.name}:${p.status.containerStatuses?.map((s) => `${s.containerID}/${s.restartCount}/${s.ready}`).join(',')}`)
    .sort();

/** How many times the kubelet has relisted the runtime's pods and containers since it started. */
async function plegRelists(): Promise<number> {
  const metrics = await kubectl(['get', '--raw', `/api/v1/nodes/${NODE_NAME}/proxy/metrics`]);
  const count = /^kubelet_pleg_relist_duration_seconds_count(?:\{[^}]*\})? (\d+)/m.exec(metrics);
  if (!count) throw new Error('the kubelet reports no kubelet_pleg_relist_duration_seconds_count');
  return Number(count[1]);
}

interface NodeImages {
  status: { images?: { names?: string[] }[] };
}
const nodeImageNames = async () => (await getJson<NodeImages>(['node', NODE_NAME])).status.images?.flatMap((i) => i.names ?? []) ?? [];

describe('cluster: node operations', function () {
  this.timeout(300_000);
  const ns = suiteNamespace('e2e-nodeops');

  it('cordon keeps new pods off the node, drain evicts, uncordon lets them back', async () => {
    await apply(busyboxDeployment(ns.name, 'drainme', 1, 'exec sleep 3600'));
    await kubectl(['-n', ns.name, 'rollout', 'status', 'deployment/drainme', '--timeout=120s'], { timeoutMs: 130_000 });
    try {
      await kubectl(['cordon', NODE_NAME]);
      await kubectl(['drain', NODE_NAME, '--pod-selector=app=drainme', '--ignore-daemonsets', '--delete-emptydir-data', '--timeout=120s'], { timeoutMs: 130_000 });
      const pending = await waitFor('the replacement pod Pending on the cordoned node', 60_000, async () => {
        const pods = await podsWithLabel(ns.name, 'app=drainme');
        return pods.length === 1 && pods[0]!.status.phase === 'Pending' ? pods[0] : undefined;
      });
      assert.equal(pending!.spec.nodeName, undefined);
    } finally {
      await kubectl(['uncordon', NODE_NAME]);
    }
    await kubectl(['-n', ns.name, 'rollout', 'status', 'deployment/drainme', '--timeout=120s'], { timeoutMs: 130_000 });
  });

  it('restarts of the kubelet and of Stove (SIGTERM, then SIGKILL) restart no container', async () => {
    await apply(busyboxPod(ns.name, 'steady', 'exec sleep 3600', { labels: { app: 'steady' }, containerYaml: '    readinessProbe: {exec: {command: ["true"]}, periodSeconds: 2}' }));
    await waitPodReady(ns.name, 'steady');
    const before = fingerprint(await podsWithLabel(ns.name, 'app=steady'));
    for (const [name, signal] of [
      ['kubelet', 'TERM'],
      ['stove', 'TERM'],
      ['stove', 'KILL'],
      ['kubelet', 'KILL'],
    ] as const) {
      await restart(name, signal);
      await waitFor(`the node Ready after ${name} SIG${signal}`, 120_000, nodeReady);
      // The kubelet has looked at the runtime's containers again: three relists after it answers.
      const relisted = await plegRelists();
      await waitFor(`three kubelet relists after ${name} SIG${signal}`, 60_000, async () => (await plegRelists()) >= relisted + 3);
      const pods = await podsWithLabel(ns.name, 'app=steady');
      assert.ok(pods.every(isReady), `not Ready after ${name} SIG${signal}`);
      assert.deepEqual(fingerprint(pods), before, `containers changed after ${name} SIG${signal}`);
    }
  });

  it("the kubelet's image GC removes unused images and leaves the pinned one", async () => {
    for (const [name, img] of [
      ['pull-pinned', image('PINNED_IMAGE')],
      ['pull-unused', image('UNUSED_IMAGE')],
    ]) {
      await apply(`apiVersion: v1
kind: Pod
metadata: {name: ${name}, namespace: ${ns.name}}
spec:
  restartPolicy: Never
  containers: [{name: main, image: '${img}', command: ['true']}]
`);
    }
    await waitFor('both images on the node', 120_000, async () => {
      const names = await nodeImageNames();
      return names.includes(image('PINNED_IMAGE')) && names.includes(image('UNUSED_IMAGE'));
    });
    await kubectl(['-n', ns.name, 'delete', 'pod', 'pull-pinned', 'pull-unused', '--wait=true', '--timeout=60s']);
    // With both thresholds at the bottom, the kubelet frees every unused image at its first GC run,
    // which comes right after it starts.
    await restart('kubelet', 'TERM', { KUBELET_CONFIG_PATCH: 'imageGCHighThresholdPercent: 1\nimageGCLowThresholdPercent: 0' });
    try {
      await waitFor('the unused image collected', 180_000, async () => !(await nodeImageNames()).includes(image('UNUSED_IMAGE')));
      assert.ok((await nodeImageNames()).includes(image('PINNED_IMAGE')), 'the pinned image was collected');
    } finally {
      await restart('kubelet', 'TERM');
      await waitFor('the node Ready', 120_000, nodeReady);
    }
  });
});
