import assert from 'node:assert/strict';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { NO_LIMIT_BYTES, sharesToWeight, v1Writes, v2Writes, writeCgroupLimits } from '../../../src/sandbox/cgroup-limits.js';
import { linuxResources, specToJson } from '../../../src/oci/index.js';
import { parseInt64Json } from '../../../src/common/json.js';
import type { CgroupLayout } from '../../../src/platform/cgroups.js';
import { StoveError } from '../../../src/common/errors.js';
import { podLimits } from '../../../src/sandbox/resize.js';
import { LinuxContainerResources } from '../../../src/gen/runtime/v1/api.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

describe('cgroup limits', () => {
  const dir = tempDirPerTest('stove-cgl-');

  it("converts shares to v2 weight as runc does", () => {
    assert.equal(sharesToWeight(2), 1);
    assert.equal(sharesToWeight(1024), 39);
    assert.equal(sharesToWeight(262144), 10000);
  });

  it('maps resources to v1 and v2 files', () => {
    const r = { cpu: { shares: 512, quota: 50000, period: 100000 }, memory: { limit: 1 << 28, swap: 1 << 29 }, hugepageLimits: [{ pageSize: '2MB', limit: 0 }] };
    assert.deepEqual(v1Writes(r).map((w) => `${w.controller}/${w.file}=${w.value}`), [
      'cpu/cpu.shares=512',
      'cpu/cpu.cfs_period_us=100000',
      'cpu/cpu.cfs_quota_us=50000',
      'memory/memory.limit_in_bytes=268435456',
      'memory/memory.memsw.limit_in_bytes=536870912',
      'hugetlb/hugetlb.2MB.limit_in_bytes=0',
    ]);
    assert.deepEqual(v2Writes({ ...r, unified: { 'memory.high': '1000' } }).map((w) => `${w.file}=${w.value}`), [
      'cpu.weight=20',
      'cpu.max=50000 100000',
      'memory.max=268435456',
      'memory.swap.max=268435456',
      'hugetlb.2MB.max=0',
      'memory.high=1000',
    ]);
    assert.deepEqual(v2Writes({ cpu: { quota: -1, period: 100000 } }).map((w) => `${w.file}=${w.value}`), ['cpu.max=max 100000']);
  });

  it('writes an existing cgroup of a v2 tree, and refuses a missing one', async () => {
    const layout: CgroupLayout = { version: 2, hierarchies: [{ version: 2, controllers: [], mountPoint: dir(), root: '/' }] };
    await mkdir(join(dir(), 'kubepods/pod1'), { recursive: true });
    await writeCgroupLimits(layout, '/kubepods/pod1', { cpu: { shares: 1024 }, memory: { limit: 4096 } });
    assert.equal(await readFile(join(dir(), 'kubepods/pod1/cpu.weight'), 'utf8'), '39');
    assert.equal(await readFile(join(dir(), 'kubepods/pod1/memory.max'), 'utf8'), '4096');
    await assert.rejects(writeCgroupLimits(layout, '/kubepods/pod2', { cpu: { shares: 2 } }), (e: unknown) => e instanceof StoveError && e.kind === 'FailedPrecondition' && /does not exist/.test(e.message));
  });

  it('on v1, writes each controller in its hierarchy and names a missing controller', async () => {
    const layout: CgroupLayout = {
      version: 1,
      hierarchies: [
        { version: 1, controllers: ['cpu', 'cpuacct'], mountPoint: join(dir(), 'cpu'), root: '/' },
        { version: 1, controllers: ['memory'], mountPoint: join(dir(), 'memory'), root: '/' },
      ],
    };
    for (const c of ['cpu', 'memory']) await mkdir(join(dir(), c, 'pod'), { recursive: true });
    await writeFile(join(dir(), 'memory/pod/memory.memsw.limit_in_bytes'), '');
    await writeCgroupLimits(layout, '/pod', { cpu: { quota: 20000, period: 100000 }, memory: { limit: 100, swap: 200 } });
    assert.equal(await readFile(join(dir(), 'cpu/pod/cpu.cfs_quota_us'), 'utf8'), '20000');
    assert.equal(await readFile(join(dir(), 'memory/pod/memory.limit_in_bytes'), 'utf8'), '100');
    assert.equal(await readFile(join(dir(), 'memory/pod/memory.memsw.limit_in_bytes'), 'utf8'), '200');
    await assert.rejects(writeCgroupLimits(layout, '/pod', { hugepageLimits: [{ pageSize: '2MB', limit: 0 }] }), /hugetlb cgroup controller is not mounted/);
  });

  it('puts back what it wrote when a later write is refused', async () => {
    const layout: CgroupLayout = { version: 2, hierarchies: [{ version: 2, controllers: [], mountPoint: dir(), root: '/' }] };
    const pod = join(dir(), 'pod');
    await mkdir(pod, { recursive: true });
    await writeFile(join(pod, 'cpu.weight'), '100\n');
    await writeFile(join(pod, 'cpu.max'), 'max 100000\n');
    // A directory where memory.max should be: the write fails (EISDIR) after the CPU ones.
    await mkdir(join(pod, 'memory.max'));
    await assert.rejects(
      writeCgroupLimits(layout, '/pod', { cpu: { shares: 1024, quota: 50000, period: 100000 }, memory: { limit: 4096 } }),
      (e: unknown) => e instanceof StoveError && e.kind === 'Internal' && /memory\.max: EISDIR; the values written before it were put back/.test(e.message),
    );
    assert.equal(await readFile(join(pod, 'cpu.weight'), 'utf8'), '100');
    assert.equal(await readFile(join(pod, 'cpu.max'), 'utf8'), 'max 100000');
  });

  it('sizes a pod cgroup as its resources plus the overhead', () => {
    const limits = podLimits(
      LinuxContainerResources.fromPartial({ cpuShares: 1024n, cpuQuota: 200000n, cpuPeriod: 100000n, memoryLimitInBytes: 1000n, hugepageLimits: [{ pageSize: '2MB', limit: 0n }] }),
      LinuxContainerResources.fromPartial({ cpuShares: 100n, cpuQuota: 10000n, memoryLimitInBytes: 24n, hugepageLimits: [{ pageSize: '2MB', limit: 0n }] }),
    );
    assert.equal(limits.cpuShares, 1124n);
    assert.equal(limits.cpuQuota, 210000n);
    assert.equal(limits.cpuPeriod, 100000n);
    assert.equal(limits.memoryLimitInBytes, 1024n);
    assert.deepEqual(limits.hugepageLimits, [{ pageSize: '2MB', limit: 0n }]);
    // No limit in the resources: the overhead alone sets none.
    assert.equal(podLimits(LinuxContainerResources.fromPartial({}), LinuxContainerResources.fromPartial({ memoryLimitInBytes: 24n })).memoryLimitInBytes, 0n);
  });

  describe('the kubelet\'s "no limit" in UpdatePodSandboxResources', () => {
    // What a 1.36 kubelet sends for a burstable pod without memory or CPU limits: the values it read
    // back from the pod cgroup (kuberuntime doPodResizeAction → GetPodCgroupConfig), less the overhead.
    const V1_MEMORY = 9223372036854771712n; // unlimited v1 memory.limit_in_bytes (4 KiB pages)
    const V2_MEMORY = -1n; // v2 memory.max "max", read as uint64 max, cast to int64
    const NO_QUOTA = -1n; // v1 cpu.cfs_quota_us, and v2 cpu.max "max"
    const MiB = 1n << 20n;
    const overhead = LinuxContainerResources.fromPartial({ cpuShares: 26n, cpuQuota: 25_000n, cpuPeriod: 100_000n, memoryLimitInBytes: 64n * MiB });
    const host = { cgroupV2: false, swapControllerAvailable: true, hugetlbControllerAvailable: true };
    const kubelet = (memory: bigint, quota: bigint, withOverhead: boolean) =>
      LinuxContainerResources.fromPartial({
        cpuPeriod: 100_000n,
        cpuShares: 102n,
        cpuQuota: withOverhead ? quota - 25_000n : quota,
        memoryLimitInBytes: withOverhead ? memory - 64n * MiB : memory,
      });

    for (const [name, memory] of [['v1', V1_MEMORY], ['v2', V2_MEMORY]] as const) {
      for (const withOverhead of [false, true]) {
        it(`keeps a ${name} pod unlimited${withOverhead ? ' with overhead' : ''}: -1 on v1, "max" on v2`, () => {
          const limits = podLimits(kubelet(memory, NO_QUOTA, withOverhead), withOverhead ? overhead : undefined);
          assert.equal(limits.memoryLimitInBytes, -1n);
          assert.equal(limits.cpuQuota, -1n);
          assert.equal(limits.cpuShares, withOverhead ? 128n : 102n);
          const spec = linuxResources(limits, host);
          assert.deepEqual(spec.memory, { limit: -1, swap: -1 });
          assert.deepEqual(
            v1Writes(spec).map((w) => `${w.file}=${w.value}`),
            [`cpu.shares=${withOverhead ? 128 : 102}`, 'cpu.cfs_period_us=100000', 'cpu.cfs_quota_us=-1', 'memory.limit_in_bytes=-1', 'memory.memsw.limit_in_bytes=-1'],
          );
          assert.deepEqual(
            v2Writes(spec).map((w) => `${w.file}=${w.value}`),
            [`cpu.weight=${withOverhead ? 5 : 4}`, 'cpu.max=max 100000', 'memory.max=max', 'memory.swap.max=max'],
          );
        });
      }
    }

    it('never leaves int64, and "no limit" in any byte field stays one', () => {
      const INT64_MAX = (1n << 63n) - 1n;
      const limits = podLimits(
        LinuxContainerResources.fromPartial({
          memoryLimitInBytes: INT64_MAX,
          memorySwapLimitInBytes: V1_MEMORY,
          cpuShares: 262_144n,
          hugepageLimits: [{ pageSize: '2MB', limit: (1n << 64n) - 1n }, { pageSize: '1GB', limit: V1_MEMORY }],
        }),
        LinuxContainerResources.fromPartial({ memoryLimitInBytes: INT64_MAX, memorySwapLimitInBytes: INT64_MAX, cpuShares: 1024n, hugepageLimits: [{ pageSize: '2MB', limit: 1n << 30n }] }),
      );
      assert.equal(limits.memoryLimitInBytes, -1n);
      assert.equal(limits.memorySwapLimitInBytes, -1n);
      assert.equal(limits.cpuShares, 262_144n);
      assert.deepEqual(limits.hugepageLimits, [{ pageSize: '2MB', limit: NO_LIMIT_BYTES }, { pageSize: '1GB', limit: NO_LIMIT_BYTES }]);
      const spec = linuxResources(limits, host);
      assert.deepEqual(v1Writes(spec).filter((w) => w.controller === 'hugetlb').map((w) => w.value), ['-1', '-1']);
      assert.deepEqual(v2Writes(spec).filter((w) => w.file.startsWith('hugetlb')).map((w) => w.value), ['max', 'max']);
      // A finite limit near the top is kept exactly, not rounded through a double.
      const near = podLimits(LinuxContainerResources.fromPartial({ memoryLimitInBytes: NO_LIMIT_BYTES - 4096n }), undefined);
      assert.equal(near.memoryLimitInBytes, NO_LIMIT_BYTES - 4096n);
      assert.deepEqual(v1Writes(linuxResources(near, host)).map((w) => w.value), ['9223372036854706176', '9223372036854706176']);
    });
  });

  it('carries an int64 beyond 2^53 into config.json digit for digit, and reads it back exactly', () => {
    const host = { cgroupV2: false, swapControllerAvailable: true, hugetlbControllerAvailable: true };
    const r = linuxResources(LinuxContainerResources.fromPartial({ memoryLimitInBytes: 9223372036854771712n, cpuQuota: -1n, hugepageLimits: [{ pageSize: '2MB', limit: (1n << 64n) - 1n }] }), host);
    assert.equal(r.memory?.limit, 9223372036854771712n);
    const text = specToJson({ ociVersion: '1.2.0', linux: { resources: r } });
    assert.match(text, /"limit": 9223372036854771712,/);
    assert.match(text, /"swap": 9223372036854771712\n/);
    assert.match(text, /"quota": -1\n/);
    assert.match(text, /"limit": 18446744073709551615\n/);
    assert.doesNotMatch(text, /9223372036854772000|e\+/);
    const back = parseInt64Json<{ linux: { resources: typeof r } }>(text);
    assert.deepEqual(back.linux.resources, r);
  });
});
