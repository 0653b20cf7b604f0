import assert from 'node:assert/strict';
import {
  cgroupDirs,
  cgroupOfProcess,
  cgroupParentPath,
  cgroupPathOf,
  expandSlice,
  layoutFromMountInfo,
  parseFlatKeyed,
  statsFromV1,
  statsFromV2,
} from '../../../src/platform/cgroups.js';
import { capabilitiesFromMask, mountContaining, parseMountInfo, propagationOf } from '../../../src/platform/proc.js';
import { StoveError } from '../../../src/common/errors.js';

/** mountinfo of this kind of machine: cgroup v1 hybrid, one hierarchy per controller. */
const HYBRID = `23 1 252:1 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`;

/** A systemd host on cgroup v2. */
const V2 = `23 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`;

/** cgroup v1 with cpu and cpuacct co-mounted, as most distributions do. */
const COMOUNTED = `32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 /kubepods /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
`;

const V1_MEMORY_STAT = `cache 1048576
rss 2097152
rss_huge 0
inactive_file 524288
pgfault 300
pgmajfault 2
total_cache 3145728
total_rss 4194304
total_inactive_file 1048576
total_pgfault 900
total_pgmajfault 7
`;

const V2_MEMORY_STAT = `anon 6291456
file 2097152
kernel 1000
inactive_anon 100
active_anon 200
inactive_file 1572864
active_file 524288
pgfault 1234
pgmajfault 5
`;

describe('cgroups', () => {
  it('finds v1 hierarchies on a hybrid host and treats it as v1', () => {
    const layout = layoutFromMountInfo(parseMountInfo(HYBRID));
    assert.equal(layout.version, 1);
    assert.deepEqual(
      layout.hierarchies.map((h) => [h.version, h.controllers.join(','), h.mountPoint]),
      [
        [1, 'cpu', '/sys/fs/cgroup/cpu'],
        [1, 'cpuacct', '/sys/fs/cgroup/cpuacct'],
        [1, 'cpuset', '/sys/fs/cgroup/cpuset'],
        [1, 'memory', '/sys/fs/cgroup/memory'],
        [1, 'devices', '/sys/fs/cgroup/devices'],
        [1, 'pids', '/sys/fs/cgroup/pids'],
        [1, 'name=systemd', '/sys/fs/cgroup/systemd'],
        [2, '', '/sys/fs/cgroup/unified'],
      ],
    );
    const dirs = cgroupDirs(layout, '/kubepods/pod1/c1');
    assert.equal(dirs.memory, '/sys/fs/cgroup/memory/kubepods/pod1/c1');
    assert.equal(dirs.cpuacct, '/sys/fs/cgroup/cpuacct/kubepods/pod1/c1');
    assert.equal(dirs['name=systemd'], '/sys/fs/cgroup/systemd/kubepods/pod1/c1');
  });

  it('detects a pure v2 host', () => {
    const layout = layoutFromMountInfo(parseMountInfo(V2));
    assert.equal(layout.version, 2);
    assert.deepEqual(cgroupDirs(layout, '/kubepods/pod1/c1'), { unified: '/sys/fs/cgroup/kubepods/pod1/c1' });
  });

  it('handles co-mounted controllers and a mount root that is not /', () => {
    const layout = layoutFromMountInfo(parseMountInfo(COMOUNTED));
    const dirs = cgroupDirs(layout, '/kubepods/pod1');
    assert.equal(dirs.cpu, '/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1');
    assert.equal(dirs.cpuacct, '/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1');
    assert.equal(dirs.memory, '/sys/fs/cgroup/memory/pod1');
  });

  it('expands systemd cgroup paths as runc does', () => {
    assert.equal(expandSlice('kubepods-burstable-pod1.slice'), '/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice');
    assert.equal(expandSlice('-.slice'), '/');
    assert.equal(cgroupParentPath('kubepods-burstable-pod1.slice'), '/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice');
    assert.equal(cgroupParentPath('/kubepods.slice/kubepods-pod1.slice'), '/kubepods.slice/kubepods-pod1.slice', 'the last element names the slice');
    assert.equal(cgroupParentPath('/kubepods//burstable/'), '/kubepods/burstable');
    assert.equal(cgroupPathOf('kubepods-pod1.slice:stove:abc'), '/kubepods.slice/kubepods-pod1.slice/stove-abc.scope');
    assert.equal(cgroupPathOf('/a//b/'), '/a/b');
    for (const bad of ['a--b.slice', 'x.scope', '-a.slice']) assert.throws(() => expandSlice(bad), StoveError, bad);
    assert.throws(() => cgroupPathOf('relative/path'), /must be absolute/);
  });

  it('parses flat keyed files', () => {
    assert.deepEqual([...parseFlatKeyed('a 1\nb 22\n\nbad x\n')], [['a', 1n], ['b', 22n]]);
  });

  it('reads v1 stats: hierarchical totals, working set, limit, pids, OOM kills', () => {
    const stats = statsFromV1({
      cpuacctUsage: '123456789\n',
      memoryUsage: '8388608\n',
      memoryStat: V1_MEMORY_STAT,
      memoryLimit: '9223372036854771712\n',
      memoryOomControl: 'oom_kill_disable 0\nunder_oom 0\noom_kill 3\n',
      pidsCurrent: '4\n',
      pidsMax: 'max\n',
    });
    assert.deepEqual(stats, {
      cpu: { usageNs: 123456789n },
      memory: { usageBytes: 8388608n, workingSetBytes: 8388608n - 1048576n, rssBytes: 4194304n, pageFaults: 900n, majorPageFaults: 7n },
      pids: { current: 4n },
      oomKills: 3n,
    });
  });

  it('reads v1 stats with a limit and without hierarchical counters', () => {
    const stats = statsFromV1({ memoryUsage: '1000', memoryStat: 'rss 10\ninactive_file 2000\npgfault 1\npgmajfault 0\n', memoryLimit: '4096', pidsCurrent: '1', pidsMax: '100' });
    assert.deepEqual(stats.memory, { usageBytes: 1000n, workingSetBytes: 0n, rssBytes: 10n, pageFaults: 1n, majorPageFaults: 0n, limitBytes: 4096n, availableBytes: 4096n });
    assert.deepEqual(stats.pids, { current: 1n, limit: 100n });
    assert.equal(stats.cpu, undefined);
    assert.equal(stats.oomKills, undefined);
  });

  it('reads v2 stats: usage_usec in ns, anon as RSS, memory.max, memory.events', () => {
    const stats = statsFromV2({
      cpuStat: 'usage_usec 5000\nuser_usec 3000\nsystem_usec 2000\nnr_periods 0\n',
      memoryCurrent: '8388608\n',
      memoryStat: V2_MEMORY_STAT,
      memoryMax: '16777216\n',
      memoryEvents: 'low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n',
      pidsCurrent: '2\n',
      pidsMax: '512\n',
    });
    assert.deepEqual(stats, {
      cpu: { usageNs: 5_000_000n },
      memory: {
        usageBytes: 8388608n,
        workingSetBytes: 8388608n - 1572864n,
        rssBytes: 6291456n,
        pageFaults: 1234n,
        majorPageFaults: 5n,
        limitBytes: 16777216n,
        availableBytes: 16777216n - (8388608n - 1572864n),
      },
      pids: { current: 2n, limit: 512n },
      oomKills: 1n,
    });
    assert.equal(statsFromV2({ memoryCurrent: '1', memoryMax: 'max\n' }).memory!.limitBytes, undefined);
  });

  it('finds a process cgroup per controller', () => {
    const text = '9:name=systemd:/\n4:memory:/process_api/6a32\n2:cpu,cpuacct:/x\n0::/unified-path\n';
    assert.equal(cgroupOfProcess(text, 'memory'), '/process_api/6a32');
    assert.equal(cgroupOfProcess(text, 'cpuacct'), '/x');
    assert.equal(cgroupOfProcess(text, ''), '/unified-path');
    assert.equal(cgroupOfProcess(text, 'pids'), undefined);
  });
});

describe('proc', () => {
  it('parses mountinfo with optional fields and escapes', () => {
    const [m] = parseMountInfo('34 22 0:44 /sub /mnt/with\\040space rw,relatime shared:11 master:2 - tmpfs tmp\\040fs rw,size=1k\n');
    assert.deepEqual(m, {
      id: 34,
      parentId: 22,
      device: '0:44',
      root: '/sub',
      mountPoint: '/mnt/with space',
      options: ['rw', 'relatime'],
      optional: ['shared:11', 'master:2'],
      fsType: 'tmpfs',
      source: 'tmp fs',
      superOptions: ['rw', 'size=1k'],
    });
    assert.equal(propagationOf(m!), 'shared');
  });

  it('picks the topmost, longest mount containing a path', () => {
    const mounts = parseMountInfo('1 0 0:1 / / rw - ext4 a rw\n2 1 0:2 / /a rw - tmpfs b rw\n3 1 0:3 / /a rw master:1 - tmpfs c rw\n4 1 0:4 / /ab rw - tmpfs d rw\n');
    assert.equal(mountContaining(mounts, '/a/x')!.id, 3);
    assert.equal(mountContaining(mounts, '/abc')!.id, 1);
    assert.equal(mountContaining(mounts, '/ab')!.id, 4);
    assert.equal(propagationOf(mountContaining(mounts, '/a')!), 'slave');
    assert.equal(propagationOf(mountContaining(mounts, '/b')!), 'private');
  });

  it('decodes capability masks (this host: everything but CAP_SYS_RESOURCE)', () => {
    const caps = capabilitiesFromMask('000001fffeffffff');
    assert.equal(caps.length, 40);
    assert.ok(!caps.includes('CAP_SYS_RESOURCE'));
    assert.ok(caps.includes('CAP_CHECKPOINT_RESTORE'));
    assert.deepEqual(capabilitiesFromMask('0000000000000005'), ['CAP_CHOWN', 'CAP_DAC_READ_SEARCH']);
  });
});
