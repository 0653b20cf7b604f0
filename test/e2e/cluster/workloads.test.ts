/** Deployments, Jobs and static pods as the controllers and the kubelet drive them on Stove. */
import { strict as assert } from 'node:assert';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CLUSTER_DIR, NODE_NAME, POD_CIDR_PREFIX, apply, busyboxDeployment, image, isGone, isReady, kubectl, pod, podsWithLabel, suiteNamespace, waitFor } from './kube.js';


describe('cluster: workloads', function () {
  this.timeout(300_000);
  const ns = suiteNamespace('e2e-workloads');

  const readyPods = async () => (await podsWithLabel(ns.name, 'app=web')).filter((p) => isReady(p) && !('deletionTimestamp' in p.metadata));

  it('runs a 3-replica Deployment with pod IPs from the pod CIDR, rolls it out to another image, scales to 0 and back', async () => {
    await apply(
      busyboxDeployment(ns.name, 'web', 3, 'echo serving; exec httpd -f -p 8080 -h /etc', { containerYaml: 'readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}' }),
    );
    await kubectl(['-n', ns.name, 'rollout', 'status', 'deployment/web', '--timeout=180s'], { timeoutMs: 190_000 });
    const first = await readyPods();
    assert.equal(first.length, 3);
    for (const p of first) {
      assert.ok(p.status.podIP?.startsWith(POD_CIDR_PREFIX), `pod IP ${p.status.podIP} outside the pod CIDR`);
      assert.equal(p.spec.nodeName, NODE_NAME);
    }
    assert.equal(new Set(first.map((p) => p.status.podIP)).size, 3);

    await kubectl(['-n', ns.name, 'set', 'image', 'deployment/web', `main=${image('BUSYBOX2_IMAGE')}`]);
    await kubectl(['-n', ns.name, 'rollout', 'status', 'deployment/web', '--timeout=180s'], { timeoutMs: 190_000 });
    const rolled = await waitFor('3 pods of the new image', 60_000, async () => {
      const pods = await podsWithLabel(ns.name, 'app=web');
      return pods.length === 3 && pods.every((p) => p.status.containerStatuses?.[0]?.image === image('BUSYBOX2_IMAGE') && isReady(p)) ? pods : undefined;
    });
    const release = await kubectl(['-n', ns.name, 'exec', rolled[0]!.metadata.name, '--', 'cat', '/etc/e2e-release']);
    assert.equal(release.trim(), '2');

    await kubectl(['-n', ns.name, 'scale', 'deployment/web', '--replicas=0']);
    await waitFor('no web pods', 90_000, async () => (await podsWithLabel(ns.name, 'app=web')).length === 0);
    await kubectl(['-n', ns.name, 'scale', 'deployment/web', '--replicas=2']);
    await kubectl(['-n', ns.name, 'rollout', 'status', 'deployment/web', '--timeout=120s'], { timeoutMs: 130_000 });
    assert.equal((await readyPods()).length, 2);
  });

  it('runs a Job to completion', async () => {
    await apply(`apiVersion: batch/v1
kind: Job
metadata: {name: count, namespace: ${ns.name}}
spec:
  completions: 2
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: count
        image: ${image('BUSYBOX_IMAGE')}
        command: [sh, -c, 'for i in 1 2 3; do echo $i; done']
`);
    await kubectl(['-n', ns.name, 'wait', '--for=condition=complete', 'job/count', '--timeout=120s'], { timeoutMs: 130_000 });
    const pods = await podsWithLabel(ns.name, 'job-name=count');
    assert.equal(pods.length, 2);
    for (const p of pods) {
      assert.equal(p.status.phase, 'Succeeded');
      assert.equal(p.status.containerStatuses?.[0]?.state.terminated?.exitCode, 0);
      assert.equal((await kubectl(['-n', ns.name, 'logs', p.metadata.name])).trim(), '1\n2\n3');
    }
  });

  it('runs a static pod from the manifests directory and removes it when the file goes', async () => {
    const file = join(CLUSTER_DIR, 'manifests/static-web.yaml');
    await writeFile(
      file,
      `apiVersion: v1
kind: Pod
metadata: {name: static-web, namespace: default}
spec:
  containers:
  - name: main
    image: ${image('BUSYBOX_IMAGE')}
    command: [sleep, '3600']
`,
    );
    const mirror = `static-web-${NODE_NAME}`;
    try {
      await waitFor('the static pod Running (its mirror pod)', 120_000, async () => (await pod('default', mirror)).status.phase === 'Running');
      const annotations = (await pod('default', mirror)).metadata.annotations ?? {};
      assert.equal(annotations['kubernetes.io/config.source'], 'file');
    } finally {
      await rm(file, { force: true });
    }
    await waitFor('the mirror pod gone', 120_000, () => isGone('default', 'pod', mirror));
  });
});
