import assert from 'node:assert/strict';
import { Container, ContainerAdjustment, ContainerUpdate, CreateContainerResponse, UpdateContainerRequest, type DeepPartial } from '../../../src/gen/nri/api.js';
import { CreateResult, PluginConflictError, UpdateResult } from '../../../src/nri/result.js';
import { applyAdjustment } from '../../../src/nri/spec-adjust.js';
import type { Spec } from '../../../src/oci/index.js';

const ctr = () => Container.fromPartial({ id: 'c1', env: ['A=1', 'B=2'], mounts: [{ destination: '/data', source: '/x', type: 'bind', options: [] }] });
const answer = (p: DeepPartial<CreateContainerResponse>) => CreateContainerResponse.fromPartial(p);

describe('nri: merging plugin answers', () => {
  it('merges different settings of two plugins and shows the second what the first did', () => {
    const r = new CreateResult(ctr());
    r.apply(answer({ adjust: { env: [{ key: 'X', value: '1' }], annotations: { a: '1' } } }), '10-first');
    r.apply(answer({ adjust: { env: [{ key: 'Y', value: '2' }], linux: { resources: { memory: { limit: { value: 1n << 26n } } } } } }), '20-second');
    assert.deepEqual(r.adjust.env, [
      { key: 'X', value: '1' },
      { key: 'Y', value: '2' },
    ]);
    assert.deepEqual(r.container.env, ['A=1', 'B=2', 'X=1', 'Y=2']);
    assert.equal(r.adjust.linux?.resources?.memory?.limit?.value, 1n << 26n);
    assert.equal(r.container.annotations.a, '1');
  });

  for (const [what, first, second] of [
    ['env X', { env: [{ key: 'X', value: '1' }] }, { env: [{ key: 'X', value: '2' }] }],
    ['annotation a', { annotations: { a: '1' } }, { annotations: { a: '2' } }],
    ['mount /m', { mounts: [{ destination: '/m', source: '/a' }] }, { mounts: [{ destination: '/m', source: '/b' }] }],
    ['device /dev/x', { linux: { devices: [{ path: '/dev/x', type: 'c' }] } }, { linux: { devices: [{ path: '/dev/x', type: 'c' }] } }],
    ['memory limit', { linux: { resources: { memory: { limit: { value: 1n } } } } }, { linux: { resources: { memory: { limit: { value: 2n } } } } }],
    ['CPU pinning', { linux: { resources: { cpu: { cpus: '0' } } } }, { linux: { resources: { cpu: { cpus: '1' } } } }],
    ['rlimit RLIMIT_NOFILE', { rlimits: [{ type: 'RLIMIT_NOFILE', hard: 1n, soft: 1n }] }, { rlimits: [{ type: 'RLIMIT_NOFILE', hard: 2n, soft: 2n }] }],
    ['oom score adj', { linux: { oomScoreAdj: { value: 1n } } }, { linux: { oomScoreAdj: { value: 2n } } }],
    ['cgroups path', { linux: { cgroupsPath: '/a' } }, { linux: { cgroupsPath: '/b' } }],
    ['CDI device vendor.com/x=y', { CDIDevices: [{ name: 'vendor.com/x=y' }] }, { CDIDevices: [{ name: 'vendor.com/x=y' }] }],
    ['hugepage limit of size 2MB', { linux: { resources: { hugepageLimits: [{ pageSize: '2MB', limit: 1n }] } } }, { linux: { resources: { hugepageLimits: [{ pageSize: '2MB', limit: 2n }] } } }],
    ['unified resource memory.high', { linux: { resources: { unified: { 'memory.high': '1' } } } }, { linux: { resources: { unified: { 'memory.high': '2' } } } }],
    ['args', { args: ['a'] }, { args: ['b'] }],
    ['sysctl net.core.somaxconn', { linux: { sysctl: { 'net.core.somaxconn': '1' } } }, { linux: { sysctl: { 'net.core.somaxconn': '2' } } }],
    ['network namespace', { linux: { namespaces: [{ type: 'network', path: '/a' }] } }, { linux: { namespaces: [{ type: 'network', path: '/b' }] } }],
    ['seccomp policy', { linux: { seccompPolicy: { defaultAction: 'SCMP_ACT_ALLOW' } } }, { linux: { seccompPolicy: { defaultAction: 'SCMP_ACT_ERRNO' } } }],
  ] as const) {
    it(`refuses two plugins setting ${what}, naming both`, () => {
      const r = new CreateResult(ctr());
      r.apply(answer({ adjust: first as never }), '10-first');
      assert.throws(() => r.apply(answer({ adjust: second as never }), '20-second'), (err: Error) => {
        assert.ok(err instanceof PluginConflictError);
        assert.equal(err.message, `plugins "20-second" and "10-first" both tried to set ${what}`);
        return true;
      });
    });
  }

  it('lets a plugin remove what an earlier one set, and then set it again', () => {
    const r = new CreateResult(ctr());
    r.apply(answer({ adjust: { env: [{ key: 'X', value: '1' }], mounts: [{ destination: '/m', source: '/a' }] } }), '10-first');
    r.apply(answer({ adjust: { env: [{ key: '-X', value: '' }, { key: '-A', value: '' }], mounts: [{ destination: '-/m' }, { destination: '-/data' }] } }), '20-second');
    assert.deepEqual(r.adjust.env, [
      { key: '-X', value: '' },
      { key: '-A', value: '' },
    ]);
    assert.deepEqual(r.container.env, ['B=2']);
    assert.deepEqual(r.container.mounts, []);
    assert.deepEqual(
      r.adjust.mounts.map((m) => m.destination),
      ['-/m', '-/data'],
    );
    r.apply(answer({ adjust: { env: [{ key: 'X', value: '3' }] } }), '30-third');
    assert.deepEqual(r.container.env, ['B=2', 'X=3']);
  });

  it("takes over args with NRI's UpdateArgs marker, and shows the next plugin the new args and sysctls", () => {
    const r = new CreateResult(ctr());
    r.apply(answer({ adjust: { args: ['first'], linux: { sysctl: { 'kernel.msgmax': '1', 'net.ipv4.ip_forward': '1' } } } }), '10-first');
    r.apply(answer({ adjust: { args: ['', 'second', 'x'], linux: { sysctl: { '-net.ipv4.ip_forward': '' } } } }), '20-second');
    assert.deepEqual(r.adjust.args, ['second', 'x']);
    assert.deepEqual(r.container.args, ['second', 'x']);
    assert.deepEqual(r.adjust.linux?.sysctl, { 'kernel.msgmax': '1', '-net.ipv4.ip_forward': '' });
    assert.deepEqual(r.container.linux?.sysctl, { 'kernel.msgmax': '1' });
  });

  it('refuses a NUMA memory policy (linux.memory_policy), naming the plugin, rather than dropping it', () => {
    const r = new CreateResult(ctr());
    assert.throws(() => r.apply(answer({ adjust: { linux: { memoryPolicy: { mode: 2, nodes: '0' } } as never } }), '10-tuner'), /plugin "10-tuner" asked for a NUMA memory policy \(linux\.memory_policy\), which Stove does not apply/);
  });

  it('merges updates of other containers and refuses one of the container being created', () => {
    const r = new CreateResult(ctr());
    r.apply(answer({ update: [{ containerId: 'other', linux: { resources: { cpu: { shares: { value: 100n } } } } }] }), '10-first');
    r.apply(answer({ update: [{ containerId: 'other', linux: { resources: { memory: { limit: { value: 5n } } } } }] }), '20-second');
    assert.equal(r.containerUpdates.length, 1);
    assert.equal(r.containerUpdates[0].linux?.resources?.cpu?.shares?.value, 100n);
    assert.equal(r.containerUpdates[0].linux?.resources?.memory?.limit?.value, 5n);
    assert.throws(() => r.apply(answer({ update: [{ containerId: 'c1' }] }), '30-third'), /plugin "30-third" asked update of "c1" during creation/);
  });

  it('folds an UpdateContainer answer for the updated container into the request', () => {
    const req = UpdateContainerRequest.fromPartial({ container: { id: 'c1' }, linuxResources: { cpu: { shares: { value: 2n } } } });
    const r = new UpdateResult(req);
    r.apply([ContainerUpdate.fromPartial({ containerId: 'c1', linux: { resources: { cpu: { shares: { value: 512n } } } } })], '10-a');
    assert.equal(req.linuxResources?.cpu?.shares?.value, 512n);
    assert.equal(r.containerUpdates.length, 0);
    assert.throws(
      () => r.apply([ContainerUpdate.fromPartial({ containerId: 'c1', linux: { resources: { cpu: { shares: { value: 1n } } } } })], '20-b'),
      /plugins "20-b" and "10-a" both tried to set CPU shares/,
    );
  });
});

describe('nri: applying an adjustment to the OCI spec', () => {
  const host = { cgroups: { cgroupV2: false, swapControllerAvailable: true, hugetlbControllerAvailable: true } };
  const spec = (): Spec => ({
    ociVersion: '1.0.2',
    process: { user: { uid: 0, gid: 0 }, args: ['sh'], cwd: '/', env: ['A=1', 'B=2'], rlimits: [{ type: 'RLIMIT_NOFILE', hard: 1024, soft: 1024 }] },
    mounts: [{ destination: '/proc', type: 'proc', source: 'proc' }, { destination: '/data/sub', type: 'bind', source: '/s' }],
    annotations: { keep: '1', drop: '2' },
    linux: { resources: { devices: [{ allow: false, access: 'rwm' }] } },
  });

  it('applies every kind of adjustment', async () => {
    const s = spec();
    const warnings: string[] = [];
    await applyAdjustment(
      s,
      CreateContainerResponse.fromPartial({
        adjust: {
          annotations: { added: 'x', '-drop': '' },
          env: [{ key: 'A', value: 'changed' }, { key: '-B', value: '' }, { key: 'C', value: '3' }],
          mounts: [{ destination: '/data', type: 'bind', source: '/host', options: ['rbind', 'ro'] }],
          hooks: { prestart: [{ path: '/bin/true', args: ['true'] }], poststop: [{ path: '/bin/echo', timeout: { value: 5n } }] },
          linux: {
            devices: [{ path: '/dev/fuse', type: 'c', major: 10n, minor: 229n, fileMode: { value: 0o666 } }],
            resources: { cpu: { shares: { value: 512n }, cpus: '0' }, memory: { limit: { value: 1n << 27n } }, pids: { limit: 64n }, blockioClass: { value: 'slow' } },
            cgroupsPath: '/custom/path',
            oomScoreAdj: { value: 500n },
          },
          rlimits: [{ type: 'RLIMIT_NOFILE', hard: 4096n, soft: 2048n }, { type: 'RLIMIT_NPROC', hard: 10n, soft: 10n }],
        },
      }).adjust,
      { ...host, warn: (m) => warnings.push(m) },
    );
    assert.deepEqual(s.annotations, { keep: '1', added: 'x' });
    assert.deepEqual(s.process?.env, ['A=changed', 'C=3']);
    assert.deepEqual(
      s.mounts?.map((m) => m.destination),
      ['/data', '/proc', '/data/sub'],
    );
    assert.deepEqual(s.hooks, { prestart: [{ path: '/bin/true', args: ['true'] }], poststop: [{ path: '/bin/echo', timeout: 5 }] });
    assert.deepEqual(s.linux?.devices, [{ path: '/dev/fuse', type: 'c', major: 10, minor: 229, fileMode: 0o666 }]);
    assert.deepEqual(s.linux?.resources?.devices?.[1], { allow: true, type: 'c', major: 10, minor: 229, access: 'rw' });
    assert.deepEqual(s.linux?.resources?.cpu, { shares: 512, cpus: '0' });
    assert.deepEqual(s.linux?.resources?.memory, { limit: 1 << 27, swap: 1 << 27 });
    assert.deepEqual(s.linux?.resources?.pids, { limit: 64 });
    assert.equal(s.linux?.cgroupsPath, '/custom/path');
    assert.equal(s.process?.oomScoreAdj, 500);
    assert.deepEqual(s.process?.rlimits, [
      { type: 'RLIMIT_NOFILE', hard: 4096, soft: 2048 },
      { type: 'RLIMIT_NPROC', hard: 10, soft: 10 },
    ]);
    assert.deepEqual(warnings, ['block I/O class "slow" ignored: no block I/O classes are configured']);
  });

  it("applies v0.12's args, sysctls, namespaces and seccomp filter", async () => {
    const s = spec();
    s.linux!.sysctl = { 'kernel.msgmax': '1', 'net.ipv4.ip_forward': '1' };
    s.linux!.namespaces = [{ type: 'mount' }, { type: 'network', path: '/proc/1/ns/net' }, { type: 'ipc' }];
    const adjust = ContainerAdjustment.fromPartial({
      args: ['/bin/true', '-x'],
      linux: {
        sysctl: { 'net.core.somaxconn': '4096', '-net.ipv4.ip_forward': '' },
        namespaces: [{ type: 'network', path: '/var/run/netns/other' }, { type: '-ipc' }, { type: 'uts' }],
        seccompPolicy: { defaultAction: 'SCMP_ACT_ERRNO', defaultErrno: { value: 1 }, architectures: ['SCMP_ARCH_X86_64'], syscalls: [{ names: ['read'], action: 'SCMP_ACT_ALLOW', args: [{ index: 0, value: 3n, valueTwo: 0n, op: 'SCMP_CMP_EQ' }] }] },
      },
    });
    await applyAdjustment(s, adjust, host);
    assert.deepEqual(s.process!.args, ['/bin/true', '-x']);
    assert.deepEqual(s.linux!.sysctl, { 'kernel.msgmax': '1', 'net.core.somaxconn': '4096' });
    assert.deepEqual(s.linux!.namespaces, [{ type: 'mount' }, { type: 'network', path: '/var/run/netns/other' }, { type: 'uts' }]);
    assert.deepEqual(s.linux!.seccomp, {
      defaultAction: 'SCMP_ACT_ERRNO',
      defaultErrnoRet: 1,
      architectures: ['SCMP_ARCH_X86_64'],
      syscalls: [{ names: ['read'], action: 'SCMP_ACT_ALLOW', args: [{ index: 0, value: 3, valueTwo: 0, op: 'SCMP_CMP_EQ' }] }],
    });
    await assert.rejects(applyAdjustment(spec(), ContainerAdjustment.fromPartial({ linux: { namespaces: [{ type: 'bogus' }] } }), host), /unknown namespace type "bogus"/);
  });

  it('refuses what cannot be applied here, naming it', async () => {
    await assert.rejects(applyAdjustment(spec(), CreateContainerResponse.fromPartial({ adjust: { CDIDevices: [{ name: 'vendor.com/gpu=0' }] } }).adjust, host), /CDI devices vendor.com\/gpu=0/);
    await assert.rejects(applyAdjustment(spec(), CreateContainerResponse.fromPartial({ adjust: { linux: { resources: { unified: { 'memory.high': '1' } } } } }).adjust, host), /cgroup v2/);
    await assert.rejects(applyAdjustment(spec(), CreateContainerResponse.fromPartial({ adjust: { linux: { devices: [{ path: '/etc/passwd', type: 'c' }] } } }).adjust, host), /not below \/dev/);
    await assert.rejects(applyAdjustment(spec(), CreateContainerResponse.fromPartial({ adjust: { mounts: [{ destination: 'rel', source: '/x' }] } }).adjust, host), /not absolute/);
  });
});
