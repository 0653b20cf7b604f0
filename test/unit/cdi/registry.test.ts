import { runtimeSupportFrom } from '../../../src/cdi/runtime-support.js';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CdiRegistry } from '../../../src/cdi/registry.js';
import { applyEdits, completeNode, hostNode, mergeEdits, type ResolvedEdits } from '../../../src/cdi/edits.js';
import { silentLogger } from '../../../src/common/logger.js';
import type { Spec } from '../../../src/oci/types.js';

function baseSpec(): Spec {
  return {
    ociVersion: '1.0.2',
    process: { user: { uid: 1000, gid: 1000 }, args: ['sh'], cwd: '/', env: ['PATH=/bin', 'GPU=none'] },
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc' },
      { destination: '/etc/hosts', type: 'bind', source: '/pod/hosts' },
    ],
    linux: { devices: [], resources: { devices: [{ allow: false, access: 'rwm' }] } },
  };
}

const specFile = (kind: string, devices: Record<string, unknown>, edits?: Record<string, unknown>, version = '0.6.0') =>
  JSON.stringify({
    cdiVersion: version,
    kind,
    devices: Object.entries(devices).map(([name, containerEdits]) => ({ name, containerEdits })),
    ...(edits ? { containerEdits: edits } : {}),
  });

describe('cdi edits', () => {
  it('fills type, numbers and mode from the host node, keeping what the spec gives', async () => {
    const host = await hostNode('/dev/null');
    assert.ok(!(host instanceof Error));
    assert.deepEqual({ type: host.type, major: host.major, minor: host.minor }, { type: 'c', major: 1, minor: 3 });
    assert.deepEqual(completeNode({ path: '/dev/x', hostPath: '/dev/null' }, host), { path: '/dev/x', hostPath: '/dev/null', type: 'c', major: 1, minor: 3, fileMode: host.fileMode });
    assert.equal(completeNode({ path: '/dev/x', hostPath: '/dev/null', fileMode: 0o600 }, host).fileMode, 0o600);
    // A fully specified node needs no host node.
    assert.deepEqual(completeNode({ path: '/dev/y', type: 'c', major: 195, minor: 0 }, new Error('ENOENT')), { path: '/dev/y', type: 'c', major: 195, minor: 0 });
    assert.throws(() => completeNode({ path: '/dev/y' }, new Error('ENOENT: no such file')), /failed to stat CDI host device "\/dev\/y": ENOENT/);
    assert.throws(() => completeNode({ path: '/dev/x', hostPath: '/dev/null', type: 'b' }, host), /host type mismatch \(b, c\)/);
    assert.ok((await hostNode('/etc/hostname')) instanceof Error);
  });

  it('applies env, nodes with cgroup rules, mounts sorted by depth, hooks, gids and intelRdt', () => {
    const spec = baseSpec();
    const edits: ResolvedEdits = {
      env: ['GPU=0', 'VENDOR=1'],
      deviceNodes: [
        { path: '/dev/gpu0', type: 'c', major: 1, minor: 3, fileMode: 0o666 },
        { path: '/dev/ro', type: 'b', major: 7, minor: 0, permissions: 'r', uid: 0 },
        { path: '/dev/none', type: 'c', major: 9, minor: 9, permissions: 'none' },
        { path: '/dev/fifo', type: 'p', major: 0, minor: 0 },
      ],
      mounts: [{ hostPath: '/usr/lib/gpu', containerPath: '/usr/lib/gpu/x', options: ['ro', 'bind'] }, { hostPath: '/lib', containerPath: '/gpu' }],
      hooks: [
        { hookName: 'createContainer', path: '/bin/hook', args: ['hook', 'a'], timeout: 5 },
        { hookName: 'poststop', path: '/bin/hook2' },
      ],
      additionalGids: [0, 44, 44, 45],
      intelRdt: { closID: 'gold', schemata: ['L3:0=ff'], enableMonitoring: true },
      netDevices: [{ hostInterfaceName: 'eth1', name: 'net0' }],
    };
    const conflicts = applyEdits(spec, edits);
    assert.deepEqual(spec.process!.env, ['PATH=/bin', 'GPU=0', 'VENDOR=1']);
    assert.deepEqual(conflicts, ['env GPU: "GPU=none" replaced by "GPU=0"']);
    assert.deepEqual(spec.linux!.devices, [
      { path: '/dev/gpu0', type: 'c', major: 1, minor: 3, fileMode: 0o666, uid: 1000, gid: 1000 },
      { path: '/dev/ro', type: 'b', major: 7, minor: 0, uid: 0, gid: 1000 },
      { path: '/dev/none', type: 'c', major: 9, minor: 9, uid: 1000, gid: 1000 },
      { path: '/dev/fifo', type: 'p', major: 0, minor: 0, uid: 1000, gid: 1000 },
    ]);
    assert.deepEqual(spec.linux!.resources!.devices, [
      { allow: false, access: 'rwm' },
      { allow: true, type: 'c', major: 1, minor: 3, access: 'rwm' },
      { allow: true, type: 'b', major: 7, minor: 0, access: 'r' },
      { allow: true, type: 'c', major: 9, minor: 9, access: '' },
    ]);
    assert.deepEqual(
      spec.mounts!.map((m) => m.destination),
      ['/proc', '/gpu', '/etc/hosts', '/usr/lib/gpu/x'],
    );
    assert.deepEqual(spec.mounts![1], { destination: '/gpu', source: '/lib' });
    assert.deepEqual(spec.hooks, { createContainer: [{ path: '/bin/hook', args: ['hook', 'a'], timeout: 5 }], poststop: [{ path: '/bin/hook2' }] });
    assert.deepEqual(spec.process!.user.additionalGids, [44, 45]);
    assert.deepEqual(spec.linux!.intelRdt, { closID: 'gold', schemata: ['L3:0=ff'], enableMonitoring: true });
    assert.deepEqual(spec.linux!.netDevices, { eth1: { name: 'net0' } });
  });

  it('replaces a device node or mount at the same path and reports it', () => {
    const spec = baseSpec();
    spec.linux!.devices = [{ path: '/dev/x', type: 'c', major: 5, minor: 5 }];
    const conflicts = applyEdits(spec, {
      env: [],
      deviceNodes: [{ path: '/dev/x', type: 'c', major: 1, minor: 3 }],
      mounts: [{ hostPath: '/other', containerPath: '/etc/hosts' }],
      hooks: [],
      additionalGids: [],
      netDevices: [],
    });
    assert.equal(spec.linux!.devices!.length, 1);
    assert.equal(spec.linux!.devices![0]!.major, 1);
    assert.equal(spec.mounts!.filter((m) => m.destination === '/etc/hosts').length, 1);
    assert.deepEqual(conflicts, ['device /dev/x: c 5:5 replaced by c 1:3', 'mount /etc/hosts: "/pod/hosts" replaced by "/other"']);
  });

  it('merges edits in order; the last intelRdt wins', () => {
    const m = mergeEdits([
      { env: ['A=1'], deviceNodes: [], mounts: [], hooks: [], additionalGids: [1], intelRdt: { closID: 'a' }, netDevices: [{ hostInterfaceName: 'eth1', name: 'net0' }] },
      { env: ['A=2'], deviceNodes: [{ path: '/dev/x' }], mounts: [], hooks: [], additionalGids: [2], intelRdt: { closID: 'b' }, netDevices: [] },
    ]);
    assert.deepEqual(m, { env: ['A=1', 'A=2'], deviceNodes: [{ path: '/dev/x' }], mounts: [], hooks: [], additionalGids: [1, 2], intelRdt: { closID: 'b' }, netDevices: [{ hostInterfaceName: 'eth1', name: 'net0' }] });
  });
});

describe('cdi registry', () => {
  let dir: string;
  let low: string;
  let high: string;
  let registry: CdiRegistry;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stove-cdi-'));
    low = join(dir, 'etc-cdi');
    high = join(dir, 'run-cdi');
    await mkdir(low);
    // `high` is created by the tests that need it: a missing dir is no error.
    registry = new CdiRegistry({ specDirs: [low, high], log: silentLogger });
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('lists devices by qualified name and skips bad files with why, keeping the good ones', async () => {
    await writeFile(join(low, 'a.json'), specFile('vendor.com/gpu', { '0': { env: ['A=1'] }, '1': { env: ['A=2'] } }));
    await writeFile(join(low, 'b.yaml'), 'cdiVersion: "0.3.0"\nkind: other.org/nic\ndevices:\n  - name: eth\n    containerEdits:\n      env: ["NIC=1"]\n');
    await writeFile(join(low, 'broken.json'), '{ "cdiVersion": "0.6.0", ');
    await writeFile(join(low, 'old.json'), specFile('vendor.com/old', { x: { env: ['A=1'] } }, undefined, '0.2.0'));
    await writeFile(join(low, 'notes.txt'), 'not a spec');
    const view = await registry.current();
    assert.deepEqual([...view.devices.keys()].sort(), ['other.org/nic=eth', 'vendor.com/gpu=0', 'vendor.com/gpu=1']);
    assert.deepEqual(
      view.rejected.map((r) => [r.path.slice(low.length + 1), r.reason.replace(/:.*/, '')]),
      [['broken.json', 'not valid JSON or YAML'], ['old.json', 'cdiVersion "0.2.0" is not one Stove reads (0.3.0 to 1.1.0)']],
    );
  });

  it('lets a later dir override a device, and makes a clash within one dir unusable', async () => {
    await mkdir(high);
    await writeFile(join(low, 'a.json'), specFile('vendor.com/gpu', { '0': { env: ['FROM=low'] }, '1': { env: ['FROM=low'] } }));
    await writeFile(join(high, 'a.json'), specFile('vendor.com/gpu', { '0': { env: ['FROM=high'] } }));
    await writeFile(join(high, 'b.json'), specFile('vendor.com/gpu', { '1': { env: ['FROM=high-b'] } }));
    await writeFile(join(high, 'c.json'), specFile('vendor.com/gpu', { '1': { env: ['FROM=high-c'] } }));
    const view = await registry.current();
    assert.equal(view.devices.get('vendor.com/gpu=0')!.spec.path, join(high, 'a.json'));
    assert.equal(view.devices.has('vendor.com/gpu=1'), false);
    assert.deepEqual(view.conflicts, [{ device: 'vendor.com/gpu=1', files: [join(high, 'b.json'), join(high, 'c.json')] }]);
    await assert.rejects(registry.inject(baseSpec(), ['vendor.com/gpu=1']), /unresolvable CDI devices vendor\.com\/gpu=1/);
  });

  it('sees files written, changed and removed after it started', async () => {
    assert.equal((await registry.current()).devices.size, 0);
    await mkdir(high);
    const path = join(high, 'late.json');
    await writeFile(path, specFile('vendor.com/gpu', { late: { env: ['V=1'] } }));
    assert.ok((await registry.current()).devices.has('vendor.com/gpu=late'));
    await writeFile(path, specFile('vendor.com/gpu', { later: { env: ['V=2'] } }));
    await utimes(path, new Date(), new Date(Date.now() + 5000)); // a new mtime even on coarse clocks
    const view = await registry.current();
    assert.deepEqual([...view.devices.keys()], ['vendor.com/gpu=later']);
    await rm(path);
    assert.equal((await registry.current()).devices.size, 0);
  });

  it('injects spec-wide edits once, before the first device of that spec, in request order', async () => {
    await writeFile(join(low, 'a.json'), specFile('vendor.com/gpu', { '0': { env: ['DEV=0'] }, '1': { env: ['DEV=1', 'ONE=1'] } }, { env: ['SPEC=gpu', 'DEV=spec'] }));
    await writeFile(join(low, 'b.json'), specFile('other.org/nic', { eth: { deviceNodes: [{ path: '/dev/nic', hostPath: '/dev/null' }] } }));
    const spec = baseSpec();
    const result = await registry.inject(spec, ['vendor.com/gpu=1', 'other.org/nic=eth', 'vendor.com/gpu=0']);
    assert.deepEqual(result.devices, ['vendor.com/gpu=1', 'other.org/nic=eth', 'vendor.com/gpu=0']);
    assert.deepEqual(spec.process!.env, ['PATH=/bin', 'GPU=none', 'SPEC=gpu', 'DEV=0', 'ONE=1']);
    assert.deepEqual(result.conflicts, ['env DEV: "DEV=spec" replaced by "DEV=1"', 'env DEV: "DEV=1" replaced by "DEV=0"']);
    assert.deepEqual(spec.linux!.devices![0], { path: '/dev/nic', type: 'c', major: 1, minor: 3, fileMode: spec.linux!.devices![0]!.fileMode, uid: 1000, gid: 1000 });
  });

  it('injects 1.1.0 net devices and intelRdt fields only into a runtime whose features have them, naming device and field otherwise', async () => {
    await writeFile(
      join(low, 'nic.json'),
      JSON.stringify({
        cdiVersion: '1.1.0',
        kind: 'vendor.com/nic',
        devices: [
          { name: 'vf0', containerEdits: { netDevices: [{ hostInterfaceName: 'ens1f0v0', name: 'net1' }] } },
          { name: 'rdt', containerEdits: { intelRdt: { closID: 'gold', schemata: ['L3:0=f'] } } },
          { name: 'mon', containerEdits: { intelRdt: { enableMonitoring: true } } },
        ],
      }),
    );
    // Debian 12's runc 1.1.5: its features document has no netDevices nor intelRdt section.
    const old = runtimeSupportFrom('/usr/bin/runc', { linux: { namespaces: ['network'], seccomp: { enabled: true } } });
    const current = runtimeSupportFrom('/opt/runc-1.5/runc', { linux: { netDevices: { enabled: true }, intelRdt: { enabled: true, schemata: true, monitoring: true } } });
    const spec = baseSpec();
    const before = JSON.stringify(spec);
    const refused = (names: string[], support: typeof old | undefined, re: RegExp) =>
      assert.rejects(registry.inject(spec, names, support), (err: Error & { kind?: string }) => err.kind === 'FailedPrecondition' && re.test(err.message));
    await refused(['vendor.com/nic=vf0'], old, /^CDI device "vendor\.com\/nic=vf0" needs netDevices \(host interface "ens1f0v0" as "net1"\), which the OCI runtime \/usr\/bin\/runc does not \(its "features" lists no linux\.netDevices/);
    await refused(['vendor.com/nic=rdt'], old, /"vendor\.com\/nic=rdt" needs intelRdt\.schemata, which the OCI runtime \/usr\/bin\/runc does not/);
    await refused(['vendor.com/nic=mon'], old, /needs intelRdt\.enableMonitoring/);
    await refused(['vendor.com/nic=vf0'], undefined, /the OCI runtime may not do: it is not known here/);
    assert.equal(JSON.stringify(spec), before);
    await registry.inject(spec, ['vendor.com/nic=vf0', 'vendor.com/nic=rdt', 'vendor.com/nic=mon'], current);
    assert.deepEqual(spec.linux!.netDevices, { ens1f0v0: { name: 'net1' } });
    assert.deepEqual(spec.linux!.intelRdt, { enableMonitoring: true });
  });

  it('names every unknown device and leaves the spec untouched', async () => {
    await writeFile(join(low, 'a.json'), specFile('vendor.com/gpu', { '0': { env: ['DEV=0'] } }));
    const spec = baseSpec();
    const before = JSON.stringify(spec);
    await assert.rejects(registry.inject(spec, ['vendor.com/gpu=0', 'vendor.com/x=y', 'a.com/b=c']), (err: Error & { kind?: string }) => {
      assert.equal(err.kind, 'InvalidArgument');
      assert.equal(err.message, 'unresolvable CDI devices vendor.com/x=y, a.com/b=c');
      return true;
    });
    assert.equal(JSON.stringify(spec), before);
  });

  it('fails an injection whose host device node is missing, leaving the spec untouched', async () => {
    await writeFile(join(low, 'a.json'), specFile('vendor.com/gpu', { '0': { deviceNodes: [{ path: join(dir, 'no-such-node') }] } }));
    const spec = baseSpec();
    const before = JSON.stringify(spec);
    await assert.rejects(registry.inject(spec, ['vendor.com/gpu=0']), (err: Error & { kind?: string }) => err.kind === 'FailedPrecondition' && /failed to stat CDI host device/.test(err.message));
    assert.equal(JSON.stringify(spec), before);
  });
});
