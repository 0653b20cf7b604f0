/** What an operator does to a node: cordon and drain, restarts of the kubelet and of Stove. */
import { strict as assert } from 'node:assert';
import { NODE_NAME, apply, busyboxDeployment, busyboxPod, isReady, kubectl, podsWithLabel, restartOnNode, suiteNamespace, waitFor, waitPodReady, type PodJson } from './kube.js';

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
      await restartOnNode(name, signal);
      // The kubelet has looked at the runtime's containers again: three relists after it answers.
      const relisted = await waitFor(`the kubelet serving its metrics after ${name} SIG${signal}`, 60_000, plegRelists);
      await waitFor(`three kubelet relists after ${name} SIG${signal}`, 60_000, async () => (await plegRelists()) >= relisted + 3);
      const pods = await podsWithLabel(ns.name, 'app=steady');
      assert.ok(pods.every(isReady), `not Ready after ${name} SIG${signal}`);
      assert.deepEqual(fingerprint(pods), before, `containers changed after ${name} SIG${signal}`);
    }
  });
});
