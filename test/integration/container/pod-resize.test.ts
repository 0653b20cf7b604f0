/**
 * UpdatePodSandboxResources (in-place pod resize) against a real daemon: the pod's own cgroup, made
 * beforehand as a kubelet makes it, gets the resources plus the overhead; the pod config records them
 * (verbose status), also after a daemon restart; bad requests get the right codes. A 1.36 kubelet
 * calls it before it changes the pod cgroup and again with the old values when that fails, and acts on
 * every error but UNIMPLEMENTED: the revert lands, a refused write leaves the cgroup as it was.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { LinuxContainerResources, UpdateContainerResourcesRequest } from '../../../src/gen/runtime/v1/api.js';
import { cgroupDirs, createCgroup, detectCgroups, removeCgroup } from '../../../src/platform/cgroups.js';
import { containerSuite, ContainerWorld, rejectsWith } from './world.js';

describe('pods: in-place resize (real runc, conmon and CNI)', function () {
  this.timeout(60_000);
  const world = new ContainerWorld();
  containerSuite(world, 'pod resize tests', { scope: 'pods' });

  it('writes the pod limits into its cgroup, records them and keeps them across a restart', async () => {
    const layout = await detectCgroups();
    const podCgroup = `${world.pods.cgroupRoot}/pod-resize-${world.pods.tag}`;
    await createCgroup(layout, podCgroup);
    try {
      const pod = await world.pod({ linux: { cgroupParent: podCgroup } });
      const ctr = await world.run(pod, world.config('sleeper'));
      const rt = world.daemon.clients.runtime;
      const MiB = 1024n * 1024n;
      await rt.updatePodSandboxResources({
        podSandboxId: pod.id,
        overhead: LinuxContainerResources.fromPartial({ cpuShares: 24n, memoryLimitInBytes: 16n * MiB }),
        resources: LinuxContainerResources.fromPartial({ cpuShares: 1000n, cpuQuota: 50_000n, cpuPeriod: 100_000n, memoryLimitInBytes: 256n * MiB }),
      });
      const dirs = cgroupDirs(layout, podCgroup);
      const read = async (controller: string, file: string) => (await readFile(join(dirs[controller]!, file), 'utf8')).trim();
      if (layout.version === 2) {
        assert.equal(await read('unified', 'cpu.max'), '50000 100000');
        assert.equal(await read('unified', 'memory.max'), String(272n * MiB));
      } else {
        assert.equal(await read('cpu', 'cpu.shares'), '1024');
        assert.equal(await read('cpu', 'cpu.cfs_quota_us'), '50000');
        assert.equal(await read('cpu', 'cpu.cfs_period_us'), '100000');
        assert.equal(await read('memory', 'memory.limit_in_bytes'), String(272n * MiB));
      }
      // The container below it still runs, now under the new ceiling.
      assert.equal((await world.exec(ctr, ['echo', 'ok'])).stdout, 'ok\n');

      const check = async () => {
        const info = await world.pods.info(pod.id);
        const resize = info.resize as { cgroup: string; limits: { memory: { limit: number } } };
        assert.equal(resize.cgroup, podCgroup);
        assert.equal(resize.limits.memory.limit, Number(272n * MiB));
        const config = info.config as { linux: { resources: { memoryLimitInBytes: string }; overhead: { cpuShares: string } } };
        assert.equal(config.linux.resources.memoryLimitInBytes, String(256n * MiB));
        assert.equal(config.linux.overhead.cpuShares, '24');
      };
      await check();
      await world.pods.restart();
      await check();

      // Lower it again (memory below the first value goes limit first on v1).
      await world.daemon.clients.runtime.updatePodSandboxResources({
        podSandboxId: pod.id,
        overhead: undefined,
        resources: LinuxContainerResources.fromPartial({ cpuShares: 500n, memoryLimitInBytes: 128n * MiB }),
      });
      if (layout.version === 1) {
        assert.equal(await read('memory', 'memory.limit_in_bytes'), String(144n * MiB));
        assert.equal(await read('cpu', 'cpu.shares'), '524');
      }
      await world.removeAll();
    } finally {
      await removeCgroup(layout, podCgroup).catch(() => {});
    }
  });

  it('answers bad requests with the right code', async () => {
    const rt = world.daemon.clients.runtime;
    const shared = await world.pod();
    await rejectsWith(
      rt.updatePodSandboxResources({ podSandboxId: shared.id, overhead: undefined, resources: LinuxContainerResources.fromPartial({ cpuShares: 512n }) }),
      'UNIMPLEMENTED',
      /pod-level resources cannot be applied to sandbox "[0-9a-f]+": it has no cgroup of its own \(no linux\.cgroup_parent in its config/,
    );
    await rejectsWith(
      rt.updatePodSandboxResources({ podSandboxId: shared.id, overhead: undefined, resources: LinuxContainerResources.fromPartial({ cpuShares: 1n }) }),
      'INVALID_ARGUMENT',
      /resources\.cpu_shares 1 is out of range/,
    );
    await rejectsWith(
      rt.updatePodSandboxResources({ podSandboxId: shared.id, overhead: LinuxContainerResources.fromPartial({ memoryLimitInBytes: -5n }), resources: undefined }),
      'INVALID_ARGUMENT',
      /overhead\.memory_limit_in_bytes -5/,
    );
    await rejectsWith(rt.updatePodSandboxResources({ podSandboxId: 'nope', overhead: undefined, resources: undefined }), 'NOT_FOUND', /nope/);
    await rejectsWith(rt.updatePodSandboxResources({ podSandboxId: '', overhead: undefined, resources: undefined }), 'INVALID_ARGUMENT', /pod_sandbox_id is required/);
  });

  it('takes back a resize when the kubelet reverts it, and leaves the cgroup as it was when a write is refused', async () => {
    const layout = await detectCgroups();
    const podCgroup = `${world.pods.cgroupRoot}/pod-revert-${world.pods.tag}`;
    await createCgroup(layout, podCgroup);
    try {
      const pod = await world.pod({ linux: { cgroupParent: podCgroup } });
      const ctr = await world.run(pod, world.config('sleeper'));
      const rt = world.daemon.clients.runtime;
      const MiB = 1024n * 1024n;
      const dirs = cgroupDirs(layout, podCgroup);
      const read = async (controller: string, file: string) => (await readFile(join(dirs[controller]!, file), 'utf8')).trim();
      const values = async () =>
        layout.version === 2
          ? { cpu: await read('unified', 'cpu.weight'), max: await read('unified', 'cpu.max'), memory: await read('unified', 'memory.max') }
          : { cpu: await read('cpu', 'cpu.shares'), max: await read('cpu', 'cpu.cfs_quota_us'), memory: await read('memory', 'memory.limit_in_bytes') };
      const recorded = async () => {
        const info = await world.pods.info(pod.id);
        return (info.config as { linux: { resources: { cpuShares: string; memoryLimitInBytes: string } } }).linux.resources;
      };
      const before = LinuxContainerResources.fromPartial({ cpuShares: 1024n, cpuQuota: 50_000n, cpuPeriod: 100_000n, memoryLimitInBytes: 256n * MiB });
      const after = LinuxContainerResources.fromPartial({ cpuShares: 2048n, cpuQuota: 150_000n, cpuPeriod: 100_000n, memoryLimitInBytes: 512n * MiB });
      await rt.updatePodSandboxResources({ podSandboxId: pod.id, overhead: undefined, resources: before });
      const atBefore = await values();

      // The kubelet announces the resize, then fails to set the pod cgroup and reverts: the old values
      // are back in the cgroup and in the record.
      await rt.updatePodSandboxResources({ podSandboxId: pod.id, overhead: undefined, resources: after });
      const atAfter = await values();
      assert.notDeepEqual(atAfter, atBefore);
      assert.equal(atAfter.memory, String(512n * MiB));
      await rt.updatePodSandboxResources({ podSandboxId: pod.id, overhead: undefined, resources: before });
      assert.deepEqual(await values(), atBefore);
      assert.equal((await recorded()).memoryLimitInBytes, String(256n * MiB));

      // A value the kernel refuses (CPUs the node does not have) after ones it took: INVALID_ARGUMENT
      // naming the file, and the earlier writes are put back; the record keeps the old resources.
      const cpuset = await read(layout.version === 2 ? 'unified' : 'cpuset', 'cpuset.cpus').catch(() => undefined);
      if (cpuset !== undefined) {
        await rejectsWith(
          rt.updatePodSandboxResources({
            podSandboxId: pod.id,
            overhead: undefined,
            resources: LinuxContainerResources.fromPartial({ ...after, cpusetCpus: '1000' }),
          }),
          'INVALID_ARGUMENT',
          /failed to write 1000 to .*cpuset\.cpus: E(INVAL|RANGE) \(the kernel refuses this value for this cgroup\); the values written before it were put back/,
        );
        assert.deepEqual(await values(), atBefore);
        assert.equal(await read(layout.version === 2 ? 'unified' : 'cpuset', 'cpuset.cpus'), cpuset);
        assert.equal((await recorded()).cpuShares, '1024');
      }
      assert.equal((await world.exec(ctr, ['echo', 'ok'])).stdout, 'ok\n');
      await world.removeAll();
    } finally {
      await removeCgroup(layout, podCgroup).catch(() => {});
    }
  });

  it('takes the kubelet\'s "no limit" of cgroup v1 and v2 in every resize RPC: the cgroups end up unlimited', async () => {
    const layout = await detectCgroups();
    const podCgroup = `${world.pods.cgroupRoot}/pod-nolimit-${world.pods.tag}`;
    await createCgroup(layout, podCgroup);
    try {
      const pod = await world.pod({ linux: { cgroupParent: podCgroup } });
      const ctr = await world.run(pod, world.config('sleeper', { linux: { resources: { cpuShares: 102n, memoryLimitInBytes: 64n << 20n } } }));
      const rt = world.daemon.clients.runtime;
      const MiB = 1024n * 1024n;
      const dirs = cgroupDirs(layout, podCgroup);
      const read = async (d: Record<string, string>, controller: string, file: string) => (await readFile(join(d[controller]!, file), 'utf8')).trim();
      // What an unlimited cgroup reads on this kernel (v1: PAGE_COUNTER_MAX pages, 9223372036854771712
      // with 4 KiB pages): what the kubelet reads back from a pod cgroup without a limit.
      const v1Unlimited = layout.version === 1 ? BigInt(await read(cgroupDirs(layout, '/'), 'memory', 'memory.limit_in_bytes')) : 0n;
      const unlimited = async (d: Record<string, string>) =>
        layout.version === 2
          ? { memory: await read(d, 'unified', 'memory.max'), cpu: await read(d, 'unified', 'cpu.max') }
          : { memory: await read(d, 'memory', 'memory.limit_in_bytes'), cpu: await read(d, 'cpu', 'cpu.cfs_quota_us') };
      const noLimit = layout.version === 2 ? { memory: 'max', cpu: 'max 100000' } : { memory: String(v1Unlimited), cpu: '-1' };
      const finite = LinuxContainerResources.fromPartial({ cpuShares: 102n, cpuQuota: 50_000n, cpuPeriod: 100_000n, memoryLimitInBytes: 256n * MiB });
      const overhead = LinuxContainerResources.fromPartial({ cpuShares: 26n, cpuQuota: 25_000n, cpuPeriod: 100_000n, memoryLimitInBytes: 64n * MiB });
      // The kubelet's resources for a pod without limits: the pod cgroup's values, less the overhead.
      const kubelet = (memory: bigint, withOverhead: boolean) =>
        LinuxContainerResources.fromPartial({
          cpuShares: 102n,
          cpuPeriod: 100_000n,
          cpuQuota: withOverhead ? -1n - 25_000n : -1n,
          memoryLimitInBytes: withOverhead ? memory - 64n * MiB : memory,
        });
      const cases: [string, bigint][] = [['cgroup v1', 9223372036854771712n], ['cgroup v2', -1n]];
      if (v1Unlimited && v1Unlimited !== 9223372036854771712n) cases.push(['this kernel', v1Unlimited]);
      for (const [name, memory] of cases) {
        for (const withOverhead of [false, true]) {
          await rt.updatePodSandboxResources({ podSandboxId: pod.id, overhead: withOverhead ? overhead : undefined, resources: finite });
          assert.notDeepEqual(await unlimited(dirs), noLimit);
          await rt.updatePodSandboxResources({ podSandboxId: pod.id, overhead: withOverhead ? overhead : undefined, resources: kubelet(memory, withOverhead) });
          assert.deepEqual(await unlimited(dirs), noLimit, `${name}${withOverhead ? ' with overhead' : ''}`);
          const info = await world.pods.info(pod.id);
          const recorded = (info.config as { linux: { resources: { memoryLimitInBytes: string } } }).linux.resources;
          assert.equal(recorded.memoryLimitInBytes, String(withOverhead ? memory - 64n * MiB : memory));
        }
      }

      // UpdateContainerResources with the same values (and the zero hugepage limits the kubelet always
      // sends): runc gets them digit for digit in its JSON and the container's cgroup has no limit.
      const info = await world.info(ctr);
      const ctrDirs = cgroupDirs(layout, info.cgroupsPath);
      for (const memory of [9223372036854771712n, -1n]) {
        await rt.updateContainerResources(
          UpdateContainerResourcesRequest.fromPartial({ containerId: ctr, linux: { memoryLimitInBytes: 64n * MiB, cpuQuota: 20_000n, cpuPeriod: 100_000n, cpuShares: 102n } }),
        );
        assert.notDeepEqual(await unlimited(ctrDirs), noLimit);
        await rt.updateContainerResources(
          UpdateContainerResourcesRequest.fromPartial({
            containerId: ctr,
            linux: { memoryLimitInBytes: memory, memorySwapLimitInBytes: memory, cpuQuota: -1n, cpuPeriod: 100_000n, cpuShares: 102n, hugepageLimits: [{ pageSize: '2MB', limit: 0n }] },
          }),
        );
        assert.deepEqual(await unlimited(ctrDirs), noLimit, `container, memory ${memory}`);
      }
      const spec = await readFile(join(info.bundle, 'config.json'), 'utf8');
      assert.match(spec, /"limit": -1,/);
      // A container created with the v1 value: config.json carries its exact digits, runc takes it.
      const created = await world.run(pod, world.config('sleeper', { linux: { resources: { cpuQuota: -1n, cpuPeriod: 100_000n, memoryLimitInBytes: 9223372036854771712n } } }));
      const createdInfo = await world.info(created);
      assert.match(await readFile(join(createdInfo.bundle, 'config.json'), 'utf8'), /"limit": 9223372036854771712,/);
      assert.deepEqual(await unlimited(cgroupDirs(layout, createdInfo.cgroupsPath)), noLimit);
      assert.equal((await world.status(created)).status!.resources!.linux!.memoryLimitInBytes, 9223372036854771712n);
      assert.equal((await world.exec(ctr, ['echo', 'ok'])).stdout, 'ok\n');
      await world.removeAll();
    } finally {
      await removeCgroup(layout, podCgroup).catch(() => {});
    }
  });
});
