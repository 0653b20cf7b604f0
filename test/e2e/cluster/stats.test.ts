/** The kubelet's resource stats of Stove's pods, and the Evented PLEG feature. */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { execa } from 'execa';
import { CLUSTER_SCRIPTS, NODE_NAME, apply, busyboxPod, getJson, kubectl, pod, suiteNamespace, waitFor, waitPodReady } from './kube.js';


interface Summary {
  pods: { podRef: { name: string; namespace: string }; cpu?: { usageNanoCores?: number }; memory?: { workingSetBytes?: number }; containers?: { name: string; cpu?: { usageCoreNanoSeconds?: number }; memory?: { workingSetBytes?: number } }[] }[];
}

async function restartKubelet(env: Record<string, string> = {}): Promise<void> {
  const result = await execa(join(CLUSTER_SCRIPTS, 'restart.sh'), ['kubelet', 'TERM'], { reject: false, all: true, env });
  if (result.exitCode !== 0) throw new Error(`restart.sh kubelet: ${result.all}`);
  await waitFor('the node Ready', 120_000, async () => {
    const node = await getJson<{ status: { conditions: { type: string; status: string }[] } }>(['node', NODE_NAME]);
    return node.status.conditions.some((c) => c.type === 'Ready' && c.status === 'True');
  });
}

describe('cluster: stats and Evented PLEG', function () {
  this.timeout(300_000);
  const ns = suiteNamespace('e2e-stats');
  before(async () => {
    await apply(busyboxPod(ns.name, 'busy', 'while true; do :; done'));
    await waitPodReady(ns.name, 'busy');
  });

  it('/stats/summary shows CPU and memory of the pod and its container', async () => {
    const entry = await waitFor('the pod in /stats/summary with CPU use', 120_000, async () => {
      const summary = JSON.parse(await kubectl(['get', '--raw', `/api/v1/nodes/${NODE_NAME}/proxy/stats/summary`])) as Summary;
      const p = summary.pods.find((x) => x.podRef.name === 'busy' && x.podRef.namespace === ns.name);
      return p?.cpu?.usageNanoCores && p.memory?.workingSetBytes ? p : undefined;
    });
    assert.ok(entry.cpu!.usageNanoCores! > 1e8, `a spinning pod uses more than 0.1 core: ${entry.cpu!.usageNanoCores}`);
    const container = entry.containers?.find((c) => c.name === 'main');
    assert.ok((container?.cpu?.usageCoreNanoSeconds ?? 0) > 0);
    assert.ok((container?.memory?.workingSetBytes ?? 0) > 0);
  });

  it('/metrics/resource shows the container and the pod', async () => {
    const metrics = await waitFor('the pod in /metrics/resource', 120_000, async () => {
      const text = await kubectl(['get', '--raw', `/api/v1/nodes/${NODE_NAME}/proxy/metrics/resource`]);
      return text.includes(`pod="busy"`) ? text : undefined;
    });
    assert.match(metrics, new RegExp(`container_cpu_usage_seconds_total\\{container="main",namespace="${ns.name}",pod="busy"\\} [0-9.e+]+`));
    assert.match(metrics, new RegExp(`pod_memory_working_set_bytes\\{namespace="${ns.name}",pod="busy"\\} [1-9]`));
  });

  it('with the EventedPLEG feature gate on, a lifecycle converges as with relisting', async () => {
    await restartKubelet({ KUBELET_CONFIG_PATCH: 'featureGates: {EventedPLEG: true}' });
    try {
      await apply(busyboxPod(ns.name, 'evented', 'sleep 2; exit 1'));
      const restarted = await waitFor('the container to exit and restart under Evented PLEG', 120_000, async () => {
        const s = (await pod(ns.name, 'evented')).status.containerStatuses?.[0];
        return s && s.restartCount >= 1 && s.lastState?.terminated?.exitCode === 1 ? s : undefined;
      });
      assert.ok(restarted.restartCount >= 1);
      await kubectl(['-n', ns.name, 'delete', 'pod', 'evented', '--wait=true', '--timeout=60s'], { timeoutMs: 70_000 });
      // The kubelet counts its successful connections to the runtime's container event stream.
      const kubeletMetrics = await kubectl(['get', '--raw', `/api/v1/nodes/${NODE_NAME}/proxy/metrics`]);
      const connected = /^kubelet_evented_pleg_connection_success_count(?:\{[^}]*\})? (\d+)/m.exec(kubeletMetrics);
      assert.ok(connected && Number(connected[1]) > 0, 'the kubelet streams GetContainerEvents');
    } finally {
      await restartKubelet();
    }
  });
});
