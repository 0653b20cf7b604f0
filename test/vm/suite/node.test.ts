/**
 * A modern node: Stove on a pure cgroup v2 hierarchy under systemd, with the cgroup driver the guest was
 * booted for (test/vm/run.sh --driver, STOVE_TEST_CGROUP_DRIVER). Pods sit under kubelet-style parents
 * (`<root>-burstable-pod<uid>.slice` or `<root>/burstable/pod<uid>`, made as the kubelet makes them);
 * the checks read the v2 files runc wrote and systemd's units. Runs in the guest (make test-vm); skipped
 * on a cgroup v1 host.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { ContainerState, LinuxContainerResources, UpdateContainerResourcesRequest, type PodSandboxConfig, type PsiStats } from '../../../src/gen/runtime/v1/api.js';
import { cgroupDirs, detectCgroups, dirIn, parseFlatKeyed } from '../../../src/platform/cgroups.js';
import { kubeletParent, makeParent, parentPath, removeParent, unitsMatching } from '../../helpers/cgroup-driver.js';
import { REPO_ROOT } from '../../helpers/stove-process.js';
import { ContainerWorld, eventually, skipReason as containerSkipReason } from '../../integration/container/world.js';
import { suiteHooks } from '../../helpers/suite.js';

const MiB = 1024n * 1024n;

async function skipReason(): Promise<string | undefined> {
  if ((await detectCgroups()).version !== 2) return 'needs a cgroup v2 node (test/vm/run.sh boots one)';
  return containerSkipReason();
}

/** A cgroup v2 interface file of a cgroup path, trimmed. */
async function v2File(cgroupPath: string, file: string): Promise<string> {
  const layout = await detectCgroups();
  return (await readFile(join(dirIn(layout.hierarchies.find((h) => h.version === 2)!, cgroupPath), file), 'utf8')).trim();
}

/** The same for the cgroup of a spec's cgroupsPath (`/a/b/id` or `slice:stove:id`). */
async function specFile(cgroupsPath: string, file: string): Promise<string> {
  return (await readFile(join(cgroupDirs(await detectCgroups(), cgroupsPath).unified!, file), 'utf8')).trim();
}

/** runc's (and so containerd's and CRI-O's) CRI cpu shares → cgroup v2 cpu.weight. */
const cpuWeightOf = (shares: bigint) => 1n + ((shares - 2n) * 9999n) / 262142n;

const hugepages2M = existsSync('/sys/kernel/mm/hugepages/hugepages-2048kB');

describe('a cgroup v2 node under systemd (guest)', function () {
  this.timeout(300_000);
  const world = new ContainerWorld();
  const driver = world.pods.driver;
  world.pods.runtimeToml.push('pids_limit = 2048');
  /** The kubelet-made parents of this test's pods, removed after it as the kubelet removes them. */
  const made: string[] = [];

  suiteHooks({
    what: 'guest node tests',
    skipReason,
    setup: () => world.start(),
    tidy: async () => {
      await world.removeAll().catch(() => {});
      for (const parent of made.splice(0).reverse()) await removeParent(parent).catch(() => {});
    },
    leftovers: () => world.leftovers(),
    cleanup: () => world.cleanup(),
  });

  /** A pod of QoS class `qos` under kubelet-style parents: made first when `kubeletMakes`, else left to Stove. */
  async function qosPod(qos: string, kubeletMakes: boolean): Promise<{ id: string; config: PodSandboxConfig; parent: string }> {
    const uid = `${world.pods.tag}-${qos}-${made.length}-${Math.random().toString(36).slice(2, 6)}`;
    const classParent = kubeletParent(driver, world.pods.cgroupRoot, qos);
    const parent = kubeletParent(driver, world.pods.cgroupRoot, qos, `pod${uid}`);
    if (kubeletMakes) {
      for (const p of [classParent, parent]) {
        await makeParent(p);
        made.push(p);
      }
    }
    const pod = await world.pod({ metadata: { name: `p-${qos}`, namespace: 'vm', uid, attempt: 0 }, linux: { cgroupParent: parent } });
    return { ...pod, parent };
  }

  it('runs a pod and a container whose v2 files hold what runc sets for the CRI resources', async () => {
    const pod = await qosPod('burstable', true);
    const resources = {
      cpuShares: 512n,
      cpuQuota: 50_000n,
      cpuPeriod: 100_000n,
      cpusetCpus: '1',
      cpusetMems: '0',
      memoryLimitInBytes: 128n * MiB,
      memorySwapLimitInBytes: 256n * MiB,
      hugepageLimits: hugepages2M ? [{ pageSize: '2MB', limit: 4n * MiB }] : [],
      unified: { 'memory.oom.group': '1', 'io.weight': 'default 200' },
    };
    const id = await world.run(pod, world.config('sleeper', { linux: { resources } }));
    const { cgroupsPath, pid } = await world.info(id);
    assert.equal((await world.exec(id, ['echo', 'ok'])).stdout, 'ok\n');

    const file = (f: string) => specFile(cgroupsPath, f);
    assert.equal(await file('cpu.max'), '50000 100000');
    assert.equal(await file('cpu.weight'), String(cpuWeightOf(512n)));
    assert.equal(await file('cpuset.cpus'), '1');
    assert.equal(await file('cpuset.mems'), '0');
    assert.equal(await file('memory.max'), String(128n * MiB));
    // The CRI's swap limit is memory + swap; v2's memory.swap.max is the swap alone.
    assert.equal(await file('memory.swap.max'), String(128n * MiB));
    assert.equal(await file('memory.oom.group'), '1');
    assert.equal(await file('pids.max'), '2048');
    assert.equal(await file('io.weight'), 'default 200');
    if (hugepages2M) assert.equal(await file('hugetlb.2MB.max'), String(4n * MiB));

    // Where the container is: its own cgroup below the pod's parent, seen from the host; inside, its
    // cgroup namespace makes that the root.
    const own = (await readFile(`/proc/${pid}/cgroup`, 'utf8')).trim();
    const expected = driver === 'systemd' ? `${parentPath(pod.parent)}/stove-${id}.scope` : `${parentPath(pod.parent)}/${id}`;
    assert.equal(own, `0::${expected}`);
    assert.equal((await world.exec(id, ['cat', '/proc/self/cgroup'])).stdout.trim(), '0::/');
    const podInfo = await world.pods.info(pod.id);
    assert.notEqual(await nsLink(pid, 'cgroup'), await nsLink(podInfo.pid, 'cgroup'), 'a cgroup namespace of its own');

    // The pause container: CPU weight of 2 shares, in the same parent.
    const pauseCgroup = (await readFile(`/proc/${podInfo.pid}/cgroup`, 'utf8')).trim();
    assert.equal(pauseCgroup, `0::${parentPath(pod.parent)}/${world.pods.cgroupNameOf(pod.id)}`);
    assert.equal(await v2File(pauseCgroup.slice(3), 'cpu.weight'), String(cpuWeightOf(2n)));

    if (driver === 'systemd') {
      const show = async (unit: string, prop: string) => (await execa('systemctl', ['show', '-p', prop, '--value', unit])).stdout.trim();
      assert.equal(await show(`stove-${id}.scope`, 'ActiveState'), 'active');
      assert.equal(await show(`stove-${id}.scope`, 'Slice'), pod.parent);
      assert.equal(await show(`stove-${pod.id}.scope`, 'Slice'), pod.parent);
    }

    await world.daemon.clients.runtime.removePodSandbox({ podSandboxId: pod.id });
    assert.deepEqual(await unitsMatching(id, pod.id), [], 'no scope left after RemovePodSandbox');
    assert.equal(await v2File(parentPath(pod.parent), 'cgroup.procs'), '');
    assert.deepEqual(await childCgroups(parentPath(pod.parent)), [], 'nothing left in the pod cgroup');
  });

  it('removes what it brought into being when the pod parent did not exist', async () => {
    const pod = await qosPod('besteffort', false);
    const id = await world.run(pod, world.config('sleeper'));
    const { pid } = await world.info(id);
    assert.match(await readFile(`/proc/${pid}/cgroup`, 'utf8'), new RegExp(`${escape(parentPath(pod.parent))}/`));
    await world.daemon.clients.runtime.removePodSandbox({ podSandboxId: pod.id });
    const classLevel = kubeletParent(driver, world.pods.cgroupRoot, 'besteffort');
    assert.deepEqual(await unitsMatching(id, pod.id, classLevel.replace(/\.slice$/, '')), [], 'no scope or slice left');
    assert.equal(existsSync(join('/sys/fs/cgroup', parentPath(pod.parent))), false, `${pod.parent} is gone`);
    assert.equal(existsSync(join('/sys/fs/cgroup', parentPath(classLevel))), false, `${classLevel} is gone`);
  });

  it('reports stats and metrics from the v2 files, with CPU, memory and I/O pressure', async () => {
    const rt = world.daemon.clients.runtime;
    const pod = await qosPod('burstable', true);
    // CPU stalls: two busy loops under a fifth of a core. Memory and I/O stalls: synced writes of files
    // larger than the memory limit, so the page cache is reclaimed while they wait for the disk.
    const cpu = await world.run(pod, world.config('busybox', { command: ['sh', '-c', 'while :; do :; done & while :; do :; done'], linux: { resources: { cpuQuota: 20_000n, cpuPeriod: 100_000n } } }));
    const writer = await world.run(
      pod,
      world.config('busybox', {
        command: ['sh', '-c', 'while :; do dd if=/dev/zero of=/big bs=1M count=64 conv=fsync 2>/dev/null; cat /big > /dev/null; rm /big; done'],
        linux: { resources: { memoryLimitInBytes: 24n * MiB } },
      }),
    );
    const total = (p: PsiStats | undefined, line: 'Some' | 'Full') => p?.[line]?.Total ?? 0n;
    await eventually(
      'CPU, memory and I/O stall time in the containers',
      async () => {
        const [c, w] = await Promise.all([rt.containerStats({ containerId: cpu }), rt.containerStats({ containerId: writer })]);
        return total(c.stats!.cpu!.psi, 'Some') > 0n && total(w.stats!.memory!.psi, 'Some') > 0n && total(w.stats!.io?.psi, 'Some') > 0n;
      },
      120_000,
    );
    const c = (await rt.containerStats({ containerId: cpu })).stats!;
    const w = (await rt.containerStats({ containerId: writer })).stats!;
    for (const [what, p] of [['cpu', c.cpu!.psi], ['memory', w.memory!.psi], ['io', w.io!.psi]] as const) {
      assert.ok(p?.Some && p.Full, `${what} pressure has some and full lines`);
      assert.ok(p.Some.Total >= p.Full.Total, `${what}: some ≥ full`);
    }
    // The same numbers as the files (totals only grow).
    const { cgroupsPath } = await world.info(writer);
    const ioSomeNow = BigInt(/some .* total=(\d+)/.exec(await specFile(cgroupsPath, 'io.pressure'))![1]!);
    assert.ok(ioSomeNow >= w.io!.psi!.Some!.Total);
    const usage = parseFlatKeyed(await specFile(cgroupsPath, 'cpu.stat')).get('usage_usec')!;
    assert.ok(w.cpu!.usageCoreNanoSeconds!.value <= usage * 1000n + 1_000_000_000n);
    assert.ok(w.memory!.workingSetBytes!.value > 0n && w.memory!.workingSetBytes!.value <= 24n * MiB);

    // The pod's pressure is its own cgroup's (its parent).
    const ps = (await rt.podSandboxStats({ podSandboxId: pod.id })).stats!;
    assert.ok(total(ps.linux!.cpu!.psi, 'Some') > 0n, 'pod CPU pressure');
    assert.ok(ps.linux!.io?.psi?.Some, 'pod I/O pressure');
    assert.ok(ps.linux!.memory!.usageBytes!.value > 0n);
    assert.ok(ps.linux!.process!.processCount!.value >= 4n);

    // CRI metrics: the cAdvisor pressure counters (seconds) next to the usage ones.
    const names = new Set((await rt.listMetricDescriptors({})).descriptors.map((d) => d.name));
    for (const n of ['container_pressure_cpu_waiting_seconds_total', 'container_pressure_cpu_stalled_seconds_total', 'container_pressure_memory_waiting_seconds_total', 'container_pressure_io_waiting_seconds_total', 'container_pressure_io_stalled_seconds_total']) {
      assert.ok(names.has(n), `descriptor ${n}`);
    }
    await eventually(
      'a second of CPU stall in the metrics',
      async () => {
        const m = (await rt.listPodSandboxMetrics({})).podMetrics.find((p) => p.podSandboxId === pod.id);
        const cm = m?.containerMetrics.find((x) => x.containerId === cpu)?.metrics ?? [];
        return (cm.find((x) => x.name === 'container_pressure_cpu_waiting_seconds_total')?.value?.value ?? 0n) >= 1n &&
          cm.some((x) => x.name === 'container_cpu_usage_seconds_total');
      },
      120_000,
    );
  });

  it('updates container and pod resources in the v2 files', async () => {
    const rt = world.daemon.clients.runtime;
    const pod = await qosPod('burstable', true);
    const id = await world.run(pod, world.config('sleeper', { linux: { resources: { cpuShares: 256n, memoryLimitInBytes: 64n * MiB, cpusetCpus: '0' } } }));
    const { cgroupsPath } = await world.info(id);
    await rt.updateContainerResources(
      UpdateContainerResourcesRequest.fromPartial({
        containerId: id,
        linux: { cpuShares: 1024n, cpuQuota: 30_000n, cpuPeriod: 100_000n, memoryLimitInBytes: 96n * MiB, cpusetCpus: '0-1', unified: { 'memory.high': String(80n * MiB) } },
      }),
    );
    const file = (f: string) => specFile(cgroupsPath, f);
    assert.equal(await file('cpu.weight'), String(cpuWeightOf(1024n)));
    assert.equal(await file('cpu.max'), '30000 100000');
    assert.equal(await file('memory.max'), String(96n * MiB));
    assert.equal(await file('memory.high'), String(80n * MiB));
    assert.equal(await file('cpuset.cpus'), '0-1');
    assert.equal((await world.status(id)).status!.resources!.linux!.memoryLimitInBytes, 96n * MiB);

    await rt.updatePodSandboxResources({
      podSandboxId: pod.id,
      overhead: LinuxContainerResources.fromPartial({ cpuShares: 24n, memoryLimitInBytes: 16n * MiB }),
      resources: LinuxContainerResources.fromPartial({ cpuShares: 1000n, cpuQuota: 60_000n, cpuPeriod: 100_000n, memoryLimitInBytes: 256n * MiB }),
    });
    const podFile = (f: string) => v2File(parentPath(pod.parent), f);
    assert.equal(await podFile('cpu.max'), '60000 100000');
    assert.equal(await podFile('cpu.weight'), String(cpuWeightOf(1024n)));
    assert.equal(await podFile('memory.max'), String(272n * MiB));
    assert.equal((await world.exec(id, ['echo', 'ok'])).stdout, 'ok\n', 'the container runs on under the new ceiling');
  });

  it('reports OOMKilled for a memory hog', async () => {
    const pod = await qosPod('burstable', true);
    const id = await world.run(pod, world.config('busybox', { command: ['tail', '/dev/zero'], linux: { resources: { memoryLimitInBytes: 32n * MiB, unified: { 'memory.oom.group': '1' } } } }));
    const st = await world.waitExited(id, 120_000);
    assert.equal(st.reason, 'OOMKilled');
    assert.equal(st.exitCode, 137);
  });

  for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
    it(`keeps containers running and accounted across a daemon stopped by ${signal}`, async () => {
      const rt = () => world.daemon.clients.runtime;
      const pod = await qosPod('burstable', true);
      const id = await world.run(pod, world.config('busybox', { command: ['sh', '-c', 'while :; do :; done'], linux: { resources: { cpuQuota: 10_000n, cpuPeriod: 100_000n } } }));
      const { pid, cgroupsPath } = await world.info(id);
      const before = (await rt().containerStats({ containerId: id })).stats!.cpu!.usageCoreNanoSeconds!.value;
      await world.pods.restart(signal);
      assert.equal((await world.status(id)).status!.state, ContainerState.CONTAINER_RUNNING);
      assert.equal((await world.info(id)).pid, pid);
      assert.equal((await readFile(`/proc/${pid}/cgroup`, 'utf8')).trim(), `0::${(await cgroupOf(cgroupsPath))}`);
      await eventually('CPU time to grow after the restart', async () => (await rt().containerStats({ containerId: id })).stats!.cpu!.usageCoreNanoSeconds!.value > before, 30_000);
      assert.equal((await world.exec(id, ['echo', 'ok'])).stdout, 'ok\n');
      if (driver === 'systemd') assert.deepEqual(await unitsMatching(`stove-${id}.scope`), [`stove-${id}.scope`]);
    });
  }

  it('has `stove check` report the hierarchy and the driver', async () => {
    const r = await execa(join(REPO_ROOT, 'bin/stove'), ['check', '--config', world.daemon.configPath, '--config-dir', world.daemon.configDir], { reject: false });
    assert.match(r.stdout, /cgroups\s.*v2 \(unified\), controllers: .*\bcpu\b.*\bmemory\b/);
    assert.match(r.stdout, driver === 'systemd' ? /cgroup driver\s.*systemd/ : /cgroup driver\s.*cgroupfs/);
  });
});

function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

async function nsLink(pid: number, ns: string): Promise<string> {
  return (await execa('readlink', [`/proc/${pid}/ns/${ns}`])).stdout;
}

/** The v2 cgroup path of a spec's cgroupsPath. */
async function cgroupOf(cgroupsPath: string): Promise<string> {
  const layout = await detectCgroups();
  const h = layout.hierarchies.find((x) => x.version === 2)!;
  return cgroupDirs(layout, cgroupsPath).unified!.slice(h.mountPoint.length);
}

/** The child cgroups of a v2 cgroup path. */
async function childCgroups(cgroupPath: string): Promise<string[]> {
  const dir = join('/sys/fs/cgroup', cgroupPath);
  return (await readdir(dir, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name);
}
