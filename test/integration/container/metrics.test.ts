/**
 * CRI metrics (ListMetricDescriptors, ListPodSandboxMetrics, StreamPodSandboxMetrics) for a running pod
 * against a real daemon: cAdvisor's names with the label keys the kubelet expects, values that follow
 * the cgroups and the pod's network namespace.
 */
import assert from 'node:assert/strict';
import type { Metric, MetricDescriptor, PodSandboxMetrics } from '../../../src/gen/runtime/v1/api.js';
import { collect } from '../../helpers/cri-client.js';
import { detectCgroups } from '../../../src/platform/cgroups.js';
import { containerSuite, ContainerWorld, eventually } from './world.js';

const REQUIRED = [
  'container_cpu_usage_seconds_total',
  'container_memory_working_set_bytes',
  'container_memory_usage_bytes',
  'container_memory_rss',
  'container_network_receive_bytes_total',
  'container_network_transmit_bytes_total',
  'container_fs_usage_bytes',
  'container_processes',
  'container_oom_events_total',
  'container_spec_memory_limit_bytes',
];

describe('CRI metrics of a running pod (real runc, conmon and CNI)', function () {
  this.timeout(60_000);
  const world = new ContainerWorld();
  containerSuite(world, 'metrics tests', { scope: 'pods' });

  it('describes the cAdvisor metrics and reports them for the pod and each running container', async () => {
    const rt = world.daemon.clients.runtime;
    const { descriptors } = await rt.listMetricDescriptors({});
    const byName = new Map<string, MetricDescriptor>(descriptors.map((d) => [d.name, d]));
    for (const name of REQUIRED) assert.ok(byName.has(name), name);
    for (const d of descriptors) {
      assert.deepEqual(d.labelKeys.slice(0, 2), ['id', 'name'], d.name);
      // The kubelet adds these itself; a runtime sending them would collide.
      for (const k of ['namespace', 'pod', 'container']) assert.ok(!d.labelKeys.includes(k), `${d.name} has ${k}`);
      assert.ok(d.help.length > 0);
    }
    assert.deepEqual(byName.get('container_network_receive_bytes_total')!.labelKeys, ['id', 'name', 'interface']);
    assert.deepEqual(byName.get('container_fs_usage_bytes')!.labelKeys, ['id', 'name', 'device']);

    const pod = await world.pod();
    const limit = 64n * 1024n * 1024n;
    const busy = await world.run(pod, world.config('busybox', { command: ['sh', '-c', 'while :; do :; done'], linux: { resources: { memoryLimitInBytes: limit } } }));
    const idle = await world.run(pod, world.config('sleeper'));
    await world.exec(idle, ['sh', '-c', 'dd if=/dev/zero of=/tmp/blob bs=1k count=512 2>/dev/null']);

    const value = (ms: Metric[], name: string) => ms.find((m) => m.name === name)?.value?.value;
    const ours = (all: PodSandboxMetrics[]) => all.find((p) => p.podSandboxId === pod.id)!;
    let metrics!: PodSandboxMetrics;
    await eventually(
      'a second of CPU time in the busy container',
      async () => {
        metrics = ours((await rt.listPodSandboxMetrics({})).podMetrics);
        const c = metrics.containerMetrics.find((x) => x.containerId === busy)!;
        return (value(c.metrics, 'container_cpu_usage_seconds_total') ?? 0n) >= 1n;
      },
      15_000,
    );

    // Every sample names a described metric, with one value per label key.
    const all = [...metrics.metrics, ...metrics.containerMetrics.flatMap((c) => c.metrics)];
    for (const m of all) {
      const d = byName.get(m.name);
      assert.ok(d, `undescribed ${m.name}`);
      assert.equal(m.labelValues.length, d.labelKeys.length, m.name);
      assert.ok(m.timestamp > 0n);
    }
    // Pod level: totals, and the pod's interface (not loopback).
    assert.deepEqual(metrics.metrics.filter((m) => m.name === 'container_network_receive_bytes_total').map((m) => m.labelValues[2]), ['eth0']);
    assert.equal(metrics.metrics.find((m) => m.name === 'container_processes')!.labelValues[0], pod.id);
    assert.ok(value(metrics.metrics, 'container_processes')! >= 3n, 'pause and both containers');
    // Containers: their own cgroup and writable layer.
    assert.deepEqual(metrics.containerMetrics.map((c) => c.containerId).sort(), [busy, idle].sort());
    const busyMetrics = metrics.containerMetrics.find((c) => c.containerId === busy)!.metrics;
    const idleMetrics = metrics.containerMetrics.find((c) => c.containerId === idle)!.metrics;
    assert.equal(value(busyMetrics, 'container_spec_memory_limit_bytes'), limit);
    assert.equal(value(idleMetrics, 'container_spec_memory_limit_bytes'), 0n);
    assert.ok(value(idleMetrics, 'container_memory_working_set_bytes')! > 0n);
    assert.ok(value(idleMetrics, 'container_fs_usage_bytes')! >= 512n * 1024n, 'the 512 KiB written');
    assert.equal(value(busyMetrics, 'container_oom_events_total'), 0n);
    assert.equal(busyMetrics[0]!.labelValues[0], busy);
    assert.match(busyMetrics[0]!.labelValues[1]!, /_pod\d+_stove-it_/);

    // The stream: the same pods, the same metric names.
    const streamed = (await collect(world.daemon.clients.rawRuntime.streamPodSandboxMetrics({}))).flatMap((m) => m.podSandboxMetrics);
    const unary = (await rt.listPodSandboxMetrics({})).podMetrics;
    assert.deepEqual(streamed.map((p) => p.podSandboxId).sort(), unary.map((p) => p.podSandboxId).sort());
    const names = (p: PodSandboxMetrics) => [...p.metrics, ...p.containerMetrics.flatMap((c) => c.metrics)].map((m) => `${m.name}{${m.labelValues.join(',')}}`).sort();
    assert.deepEqual(names(ours(streamed)), names(ours(unary)));

    // PSI: cgroup v2 only; on a v1 host (like this kind of machine) absent, not zero.
    const stats = (await rt.containerStats({ containerId: idle })).stats!;
    const podStats = (await rt.podSandboxStats({ podSandboxId: pod.id })).stats!;
    if ((await detectCgroups()).version === 1) {
      assert.equal(stats.cpu!.psi, undefined);
      assert.equal(stats.memory!.psi, undefined);
      assert.equal(stats.io, undefined);
      assert.equal(podStats.linux!.io, undefined);
    } else {
      assert.ok(stats.cpu!.psi?.Some);
      assert.ok(stats.io?.psi);
    }

    // A stopped container leaves the list.
    await rt.stopContainer({ containerId: busy, timeout: 0n });
    const after = ours((await rt.listPodSandboxMetrics({})).podMetrics);
    assert.deepEqual(after.containerMetrics.map((c) => c.containerId), [idle]);
  });
});
