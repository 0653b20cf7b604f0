/** Init containers, probes and restarts with back-off, as the kubelet runs them through Stove. */
import { strict as assert } from 'node:assert';
import { apply, busyboxPod, httpService, getJson, image, kubectl, pod, suiteNamespace, waitFor, waitPodReady } from './kube.js';

describe('cluster: init containers and probes', function () {
  this.timeout(300_000);
  const ns = suiteNamespace('e2e-probes');

  it('runs init containers in order, each to completion, before the main container', async () => {
    await apply(`apiVersion: v1
kind: Pod
metadata: {name: inits, namespace: ${ns.name}}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: work, emptyDir: {}}]
  initContainers:
  - {name: first, image: ${image('BUSYBOX_IMAGE')}, command: [sh, -c, 'sleep 1; echo first >> /work/order'], volumeMounts: [{name: work, mountPath: /work}]}
  - {name: second, image: ${image('BUSYBOX_IMAGE')}, command: [sh, -c, 'echo second >> /work/order'], volumeMounts: [{name: work, mountPath: /work}]}
  containers:
  - {name: main, image: ${image('BUSYBOX_IMAGE')}, command: [sh, -c, 'echo main >> /work/order; exec sleep 3600'], volumeMounts: [{name: work, mountPath: /work}]}
`);
    const p = await waitPodReady(ns.name, 'inits');
    assert.deepEqual(
      p.status.initContainerStatuses?.map((s) => [s.name, s.state.terminated?.exitCode, s.state.terminated?.reason]),
      [
        ['first', 0, 'Completed'],
        ['second', 0, 'Completed'],
      ],
    );
    const [first, second] = p.status.initContainerStatuses!;
    assert.ok(Date.parse(first!.state.terminated!.finishedAt!) <= Date.parse(second!.state.terminated!.startedAt!));
    assert.equal((await kubectl(['-n', ns.name, 'exec', 'inits', '--', 'cat', '/work/order'])).trim(), 'first\nsecond\nmain');
  });

  it('restarts a container whose liveness probe fails, with back-off into CrashLoopBackOff', async () => {
    await apply(
      busyboxPod(ns.name, 'liveness', 'exec sleep 3600', {
        containerYaml: '    livenessProbe: {exec: {command: [test, -e, /nonexistent]}, periodSeconds: 1, failureThreshold: 1}',
      }),
    );
    const crashing = await waitFor('CrashLoopBackOff after restarts', 200_000, async () => {
      const s = (await pod(ns.name, 'liveness')).status.containerStatuses?.[0];
      return s && s.restartCount >= 2 && s.state.waiting?.reason === 'CrashLoopBackOff' ? s : undefined;
    });
    assert.equal(crashing.lastState?.terminated?.exitCode, 137);
    const events = await kubectl(['-n', ns.name, 'get', 'events', '--field-selector', 'involvedObject.name=liveness', '-o', 'jsonpath={.items[*].message}']);
    assert.match(events, /Liveness probe failed/);
    assert.match(events, /Back-off restarting failed container/);
  });

  it('gates a Service\'s endpoints on readiness, with exec, TCP and HTTP probes', async () => {
    await apply(`${httpService(ns.name, 'gated', 'gated')}
---
${busyboxPod(ns.name, 'gated', 'mkdir -p /www; echo ok > /www/index.html; exec httpd -f -p 8080 -h /www', {
  containerYaml: `    readinessProbe: {exec: {command: [test, -e, /tmp/ready]}, periodSeconds: 1}
    livenessProbe: {tcpSocket: {port: 8080}, periodSeconds: 2}
    startupProbe: {httpGet: {path: /index.html, port: 8080}, periodSeconds: 1, failureThreshold: 30}`,
})}`);
    await waitFor('the container running, started', 120_000, async () => (await pod(ns.name, 'gated')).status.containerStatuses?.[0]?.started === true);
    const endpoints = async () => {
      const slices = await getJson<{ items: { endpoints?: { conditions?: { ready?: boolean } }[] }[] }>(['-n', ns.name, 'endpointslices', '-l', 'kubernetes.io/service-name=gated']);
      return slices.items.flatMap((s) => s.endpoints ?? []).filter((e) => e.conditions?.ready).length;
    };
    assert.equal((await pod(ns.name, 'gated')).status.containerStatuses?.[0]?.ready, false);
    assert.equal(await endpoints(), 0);
    await kubectl(['-n', ns.name, 'exec', 'gated', '--', 'touch', '/tmp/ready']);
    await waitPodReady(ns.name, 'gated', 60_000);
    await waitFor('a ready endpoint', 60_000, async () => (await endpoints()) === 1);
    await kubectl(['-n', ns.name, 'exec', 'gated', '--', 'rm', '/tmp/ready']);
    await waitFor('no ready endpoint', 60_000, async () => (await endpoints()) === 0);
    assert.equal((await pod(ns.name, 'gated')).status.containerStatuses?.[0]?.restartCount, 0);
  });
});
