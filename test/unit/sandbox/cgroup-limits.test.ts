import assert from 'node:assert/strict';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { sharesToWeight, v1Writes, v2Writes, writeCgroupLimits } from '../../../src/sandbox/cgroup-limits.js';
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
});
