/**
 * PSI and IoUsage in container and pod stats, from cgroup v2 `*.pressure` files (fixtures), and their
 * absence (not zeros) where the kernel gives none, as on cgroup v1; and the cAdvisor pressure metrics.
 */
import assert from 'node:assert/strict';
import { cp, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { ContainerConfig, PodSandboxConfig } from '../../../src/gen/runtime/v1/api.js';
import type { SandboxRecord } from '../../../src/sandbox/model.js';
import { parsePressure, readCgroupStats, type CgroupLayout } from '../../../src/platform/cgroups.js';
import { StatsReader } from '../../../src/stats/stats.js';
import { MetricsReader, metricDescriptors } from '../../../src/stats/metrics.js';
import { toContainerStats, toPodSandboxStats } from '../../../src/cri/stats-convert.js';
import type { ContainerRecord } from '../../../src/container/model.js';
import { silentLogger } from '../../../src/common/logger.js';
import { REPO_ROOT } from '../../helpers/stove-process.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

const FIXTURES = join(REPO_ROOT, 'test/fixtures');

describe('PSI and IoUsage', () => {
  const dir = tempDirPerTest('stove-psi-');

  it('parses *.pressure files, skipping what it does not understand', () => {
    assert.deepEqual(parsePressure('some avg10=1.50 avg60=0.75 avg300=0.20 total=123\n'), { some: { avg10: 1.5, avg60: 0.75, avg300: 0.2, total: 123n } });
    assert.equal(parsePressure(undefined), undefined);
    assert.equal(parsePressure(''), undefined);
    assert.equal(parsePressure('some avg10=x avg60=1 avg300=1 total=1\nnonsense\n'), undefined);
    assert.equal(parsePressure('full avg10=1 avg60=1 avg300=1 total=123456789012345678901\n'), undefined, 'more than 20 digits');
  });

  const record = (cgroupsPath: string) =>
    ({ id: 'c1', name: 'c1', cgroupsPath, config: ContainerConfig.toJSON(ContainerConfig.fromPartial({ metadata: { name: 'c1' } })) }) as unknown as ContainerRecord;
  const reader = (cgroups: CgroupLayout) =>
    new StatsReader({ cgroups, images: { rootfsUsage: async () => ({ bytes: 0n, inodes: 0n }), writableLayerFs: () => join(dir(), 'containers') }, log: silentLogger });

  it('reports cpu, memory and io pressure from a cgroup v2 tree, uint64 totals exact', async () => {
    await mkdir(join(dir(), 'v2/pods'), { recursive: true });
    await cp(join(FIXTURES, 'cgroup-v2-psi'), join(dir(), 'v2/pods/c1'), { recursive: true });
    const layout: CgroupLayout = { version: 2, hierarchies: [{ version: 2, controllers: [], mountPoint: join(dir(), 'v2'), root: '/' }] };
    const raw = await readCgroupStats(layout, '/pods/c1');
    assert.equal(raw.pressure!.memory!.some!.total, 18446744073709551615n);

    const stats = toContainerStats(await reader(layout).containerStats(record('/pods/c1')));
    assert.deepEqual(stats.cpu!.psi, {
      Some: { Total: 123456789n, Avg10: 1.5, Avg60: 0.75, Avg300: 0.2 },
      Full: { Total: 0n, Avg10: 0, Avg60: 0, Avg300: 0 },
    });
    assert.equal(stats.memory!.psi!.Some!.Total, 18446744073709551615n);
    assert.equal(stats.memory!.psi!.Full!.Avg10, 10);
    assert.deepEqual(stats.io!.psi!.Full, { Total: 2121n, Avg10: 0.05, Avg60: 0.1, Avg300: 0.15 });
    assert.ok(stats.io!.timestamp > 0n);
    assert.equal(stats.cpu!.usageCoreNanoSeconds!.value, 2_500_000_000n);
  });

  it("gives a pod the pressure of its own cgroup (its cgroup_parent), not a sum over containers", async () => {
    await mkdir(join(dir(), 'v2'), { recursive: true });
    await cp(join(FIXTURES, 'cgroup-v2-psi'), join(dir(), 'v2/kubepods/pod1'), { recursive: true });
    await cp(join(FIXTURES, 'cgroup-v2-psi'), join(dir(), 'v2/kubepods/pod1/pause'), { recursive: true });
    const layout: CgroupLayout = { version: 2, hierarchies: [{ version: 2, controllers: [], mountPoint: join(dir(), 'v2'), root: '/' }] };
    const sandbox = (cgroupParent: string) =>
      ({
        id: 'p1',
        config: PodSandboxConfig.toJSON(PodSandboxConfig.fromPartial({ metadata: { name: 'p' }, linux: { cgroupParent } })),
        cgroupsPath: '/kubepods/pod1/pause',
        netnsPath: '',
        pausePid: 0,
      }) as unknown as SandboxRecord;
    const own = toPodSandboxStats(await reader(layout).podStats(sandbox('/kubepods/pod1'), []));
    assert.equal(own.linux!.cpu!.psi!.Some!.Total, 123456789n);
    assert.equal(own.linux!.memory!.psi!.Full!.Total, 987654n);
    assert.equal(own.linux!.io!.psi!.Some!.Total, 4242n);
    // Without a cgroup of its own the pod has no pressure to report.
    const shared = toPodSandboxStats(await reader(layout).podStats(sandbox(''), []));
    assert.equal(shared.linux!.cpu!.psi, undefined);
    assert.equal(shared.linux!.io, undefined);
  });

  it('reports the pressure totals as cAdvisor\'s container_pressure_* counters, in seconds', async () => {
    await mkdir(join(dir(), 'v2/pods'), { recursive: true });
    await cp(join(FIXTURES, 'cgroup-v2-psi'), join(dir(), 'v2/pods/c1'), { recursive: true });
    const layout: CgroupLayout = { version: 2, hierarchies: [{ version: 2, controllers: [], mountPoint: join(dir(), 'v2'), root: '/' }] };
    const metrics = new MetricsReader({ cgroups: layout, images: { rootfsUsage: async () => ({ bytes: 0n, inodes: 0n }), writableLayerFs: () => join(dir(), 'containers') }, log: silentLogger });
    const sandbox = { id: 'p1', name: 'p', cgroupsPath: '', netnsPath: '', pausePid: 0 } as unknown as SandboxRecord;
    const c = { ...record('/pods/c1'), state: 'running' } as ContainerRecord;
    const samples = (await metrics.podMetrics(sandbox, [c])).containers[0]!.samples;
    const value = (name: string) => samples.find((m) => m.name === name)?.value;
    assert.equal(value('container_pressure_cpu_waiting_seconds_total'), 123n, '123456789 µs');
    assert.equal(value('container_pressure_cpu_stalled_seconds_total'), 0n);
    assert.equal(value('container_pressure_memory_waiting_seconds_total'), 18446744073709n);
    assert.equal(value('container_pressure_io_stalled_seconds_total'), 0n, '2121 µs');
    const described = new Set(metricDescriptors().map((d) => d.name));
    for (const m of samples) assert.ok(described.has(m.name), `${m.name} is described`);
  });

  it('leaves PSI and IoUsage out on cgroup v1, where the kernel has none', async () => {
    for (const c of ['cpu', 'memory']) await cp(join(FIXTURES, 'cgroup-v1'), join(dir(), 'v1', c, 'pods/c1'), { recursive: true });
    const layout: CgroupLayout = {
      version: 1,
      hierarchies: [
        { version: 1, controllers: ['cpu', 'cpuacct'], mountPoint: join(dir(), 'v1/cpu'), root: '/' },
        { version: 1, controllers: ['memory'], mountPoint: join(dir(), 'v1/memory'), root: '/' },
      ],
    };
    const stats = toContainerStats(await reader(layout).containerStats(record('/pods/c1')));
    assert.equal(stats.cpu!.usageCoreNanoSeconds!.value, 2_500_000_000n);
    assert.equal(stats.memory!.workingSetBytes!.value, 9437184n);
    assert.equal(stats.cpu!.psi, undefined);
    assert.equal(stats.memory!.psi, undefined);
    assert.equal(stats.io, undefined);
  });
});
