import assert from 'node:assert/strict';
import { CDI_VERSIONS, parseSpecText, requiredVersion } from '../../../src/cdi/spec-file.js';
import { parseQualifiedName, requestedDevices } from '../../../src/cdi/names.js';

/** A minimal valid spec with `extra` merged in at the top and `device` fields in its one device. */
function spec(version: string, extra: Record<string, unknown> = {}, device: Record<string, unknown> = {}): string {
  return JSON.stringify({
    cdiVersion: version,
    kind: 'vendor.com/gpu',
    devices: [{ name: 'gpu0', containerEdits: { env: ['GPU=0'] }, ...device }],
    ...extra,
  });
}

const reason = (text: string) => {
  try {
    parseSpecText(text);
  } catch (err) {
    return (err as Error).message;
  }
  assert.fail('expected the spec to be rejected');
};

describe('cdi spec files', () => {
  it('reads every version from 0.3.0 to 1.1.0, with or without a leading v', () => {
    for (const v of CDI_VERSIONS) {
      assert.equal(parseSpecText(spec(v)).version, v);
      assert.equal(parseSpecText(spec(`v${v}`)).version, v);
    }
  });

  it('rejects versions it does not read: older, newer, malformed', () => {
    for (const v of ['0.1.0', '0.2.0', '1.2.0', '2.0.0', '1.0', 'latest']) assert.match(reason(spec(v)), /is not one Stove reads \(0\.3\.0 to 1\.1\.0\)/);
    assert.match(reason(JSON.stringify({ kind: 'a.com/b', devices: [] })), /required field "cdiVersion"/);
  });

  it('reads YAML as well as JSON, with YAML 1.1 octal file modes', () => {
    const s = parseSpecText(`
cdiVersion: "0.5.0"
kind: vendor.com/gpu
devices:
  - name: "0"
    containerEdits:
      deviceNodes:
        - path: /dev/gpu0
          hostPath: /dev/null
          fileMode: 0640
`);
    assert.equal(s.devices[0]!.name, '0');
    assert.deepEqual(s.devices[0]!.edits.deviceNodes, [{ path: '/dev/gpu0', hostPath: '/dev/null', fileMode: 0o640 }]);
  });

  it('rejects fields newer than the declared version, naming the field and the version it needs', () => {
    assert.match(reason(spec('0.3.0', {}, { containerEdits: { mounts: [{ hostPath: '/a', containerPath: '/b', type: 'bind' }] } })), /0\.3\.0 is too old for mounts type: it needs at least 0\.4\.0/);
    assert.match(reason(spec('0.4.0', {}, { name: '0gpu' })), /starting with a digit: it needs at least 0\.5\.0/);
    assert.match(reason(spec('0.4.0', {}, { containerEdits: { deviceNodes: [{ path: '/dev/x', hostPath: '/dev/null' }] } })), /deviceNodes hostPath: it needs at least 0\.5\.0/);
    assert.match(reason(spec('0.5.0', { annotations: { 'a.com/b': 'c' } })), /annotations: it needs at least 0\.6\.0/);
    assert.match(reason(spec('0.5.0', { kind: 'vendor.com/gpu.v2' })), /the dot in class "gpu\.v2": it needs at least 0\.6\.0/);
    assert.match(reason(spec('0.6.0', { containerEdits: { additionalGids: [5] } })), /additionalGids: it needs at least 0\.7\.0/);
    assert.match(reason(spec('0.6.0', {}, { containerEdits: { intelRdt: { closID: 'x' } } })), /intelRdt: it needs at least 0\.7\.0/);
    // …and accepts them from that version on.
    assert.equal(parseSpecText(spec('0.7.0', { containerEdits: { additionalGids: [5] } }, { containerEdits: { intelRdt: { closID: 'x' } } })).edits.additionalGids[0], 5);
    assert.equal(requiredVersion(parseSpecText(spec('1.0.0'))).version, '0.3.0');
  });

  it('rejects unknown fields', () => {
    assert.match(reason(spec('1.0.0', { extra: 1 })), /spec: unknown field "extra"/);
    assert.match(reason(spec('1.1.0', {}, { containerEdits: { netDevices: [{ hostInterfaceName: 'eth1', name: 'n', mtu: 9000 }] } })), /unknown field "mtu"/);
  });

  it('reads 1.1.0: netDevices, intelRdt schemata and enableMonitoring; refuses them in older versions', () => {
    const s = parseSpecText(
      spec('1.1.0', { containerEdits: { netDevices: [{ hostInterfaceName: 'eth1', name: 'net1' }] } }, { containerEdits: { intelRdt: { closID: 'gold', schemata: ['L3:0=ff', 'MB:0=50'], enableMonitoring: true } } }),
    );
    assert.deepEqual(s.edits.netDevices, [{ hostInterfaceName: 'eth1', name: 'net1' }]);
    assert.deepEqual(s.devices[0]!.edits.intelRdt, { closID: 'gold', schemata: ['L3:0=ff', 'MB:0=50'], enableMonitoring: true });
    // A device whose only edit is a net device is a device.
    assert.equal(parseSpecText(JSON.stringify({ cdiVersion: '1.1.0', kind: 'a.com/nic', devices: [{ name: 'x', containerEdits: { netDevices: [{ hostInterfaceName: 'eth2', name: 'eth0' }] } }] })).devices.length, 1);
    assert.match(reason(spec('1.0.0', {}, { containerEdits: { netDevices: [{ hostInterfaceName: 'eth1', name: 'n' }] } })), /1\.0\.0 is too old for netDevices: it needs at least 1\.1\.0/);
    assert.match(reason(spec('1.0.0', {}, { containerEdits: { intelRdt: { schemata: [] } } })), /too old for intelRdt\.schemata: it needs at least 1\.1\.0/);
    assert.match(reason(spec('0.7.0', {}, { containerEdits: { intelRdt: { enableMonitoring: true } } })), /too old for intelRdt\.enableMonitoring/);
    // 1.1.0 dropped enableCMT and enableMBM; older versions keep them.
    assert.match(reason(spec('1.1.0', {}, { containerEdits: { intelRdt: { enableCMT: true } } })), /intelRdt\.enableCMT is not in cdiVersion 1\.1\.0/);
    assert.equal(parseSpecText(spec('1.0.0', {}, { containerEdits: { intelRdt: { enableMBM: true } } })).devices[0]!.edits.intelRdt!.enableMBM, true);
    assert.equal(requiredVersion(parseSpecText(spec('1.1.0'))).version, '0.3.0');
  });

  it('checks net devices: interface names as Linux has them, each host interface and name once', () => {
    const nd = (...netDevices: object[]) => spec('1.1.0', {}, { containerEdits: { netDevices } });
    assert.match(reason(nd({ hostInterfaceName: '', name: 'a' })), /required field "hostInterfaceName"/);
    assert.match(reason(nd({ hostInterfaceName: 'eth1' })), /required field "name"/);
    assert.match(reason(nd({ hostInterfaceName: 'a-very-long-name0', name: 'a' })), /hostInterfaceName: "a-very-long-name0" is not a network interface name \(longer than 15 bytes\)/);
    assert.match(reason(nd({ hostInterfaceName: 'eth1', name: '../x' })), /name: "\.\.\/x" is not a network interface name/);
    assert.match(reason(nd({ hostInterfaceName: 'eth1', name: 'a b' })), /white space/);
    assert.match(reason(nd({ hostInterfaceName: 'eth1', name: '..' })), /not a name/);
    assert.match(reason(nd({ hostInterfaceName: 'eth1', name: 'a' }, { hostInterfaceName: 'eth1', name: 'b' })), /host interface "eth1" named twice/);
    assert.match(reason(nd({ hostInterfaceName: 'eth1', name: 'a' }, { hostInterfaceName: 'eth2', name: 'a' })), /interface name "a" used twice/);
  });

  it('checks names: kind, device names, and unique devices', () => {
    assert.match(reason(spec('1.0.0', { kind: 'gpu' })), /kind "gpu": want vendor\.com\/class/);
    assert.match(reason(spec('1.0.0', { kind: '1vendor.com/gpu' })), /invalid vendor "1vendor\.com": should start with a letter/);
    assert.match(reason(spec('1.0.0', { kind: 'vendor.com/gpu/x' })), /invalid class "gpu\/x": invalid character '\/'/);
    assert.match(reason(spec('1.0.0', {}, { name: 'gpu-' })), /should end with a letter or digit/);
    assert.equal(parseSpecText(spec('1.0.0', {}, { name: 'gpu:0.a_b-c' })).devices[0]!.name, 'gpu:0.a_b-c');
    const twice = JSON.stringify({ cdiVersion: '1.0.0', kind: 'a.com/b', devices: [{ name: 'x', containerEdits: { env: ['A=1'] } }, { name: 'x', containerEdits: { env: ['A=1'] } }] });
    assert.match(reason(twice), /device "x" defined twice/);
    assert.match(reason(JSON.stringify({ cdiVersion: '1.0.0', kind: 'a.com/b', devices: [] })), /no devices/);
  });

  it('checks edits: env, device types and permissions, hooks, mounts, empty device edits', () => {
    assert.match(reason(spec('1.0.0', {}, { containerEdits: { env: ['=x'] } })), /invalid environment variable "=x"/);
    assert.match(reason(spec('1.0.0', {}, { containerEdits: { deviceNodes: [{ path: '/dev/x', type: 'z' }] } })), /invalid type "z"/);
    assert.match(reason(spec('1.0.0', {}, { containerEdits: { deviceNodes: [{ path: '/dev/x', permissions: 'rx' }] } })), /invalid permissions "rx"/);
    assert.equal(parseSpecText(spec('1.0.0', {}, { containerEdits: { deviceNodes: [{ path: '/dev/x', permissions: 'none' }] } })).devices[0]!.edits.deviceNodes[0]!.permissions, 'none');
    assert.match(reason(spec('1.0.0', {}, { containerEdits: { hooks: [{ hookName: 'beforeStart', path: '/bin/true' }] } })), /invalid hook name "beforeStart"/);
    assert.match(reason(spec('1.0.0', {}, { containerEdits: { hooks: [{ hookName: 'poststop', path: 'true' }] } })), /must be absolute/);
    assert.match(reason(spec('1.0.0', {}, { containerEdits: { hooks: [{ hookName: 'poststop', path: '/bin/true', timeout: 0 }] } })), /timeout must be greater than zero/);
    assert.match(reason(spec('1.0.0', {}, { containerEdits: { mounts: [{ hostPath: '/a' }] } })), /required field "containerPath"/);
    assert.match(reason(spec('1.0.0', {}, { containerEdits: {} })), /device "gpu0": no container edits/);
    assert.match(reason(spec('1.0.0', {}, { containerEdits: { deviceNodes: [{ path: '/dev/x', major: -1 }] } })), /major: want an integer/);
  });

  it('rejects what is not a spec at all', () => {
    assert.match(reason(''), /no spec data/);
    assert.match(reason('{"cdiVersion": "1.0.0", "cdiVersion": "0.3.0"}'), /not valid JSON or YAML/);
    assert.match(reason('[1, 2]'), /spec: want an object/);
    assert.match(reason('{ broken'), /not valid JSON or YAML/);
  });
});

describe('cdi names', () => {
  it('parses qualified names and says what is wrong with others', () => {
    assert.deepEqual(parseQualifiedName('nvidia.com/gpu=0'), { vendor: 'nvidia.com', class: 'gpu', name: '0' });
    assert.deepEqual(parseQualifiedName('nvidia.com/gpu=all'), { vendor: 'nvidia.com', class: 'gpu', name: 'all' });
    for (const bad of ['gpu0', 'nvidia.com/gpu', 'nvidia.com/gpu=', '/dev/null', '=x', 'nvidia.com=x']) {
      assert.ok('problem' in parseQualifiedName(bad), bad);
    }
    assert.match((parseQualifiedName('nvidia.com/gpu=a/b') as { problem: string }).problem, /invalid character '\/'/);
  });

  it('takes CDI_devices first, then cdi.k8s.io annotations in key order, each device once', () => {
    const devices = requestedDevices(['v.com/c=1', 'v.com/c=2', 'v.com/c=1'], {
      'cdi.k8s.io/plugin_b': 'v.com/c=2,v.com/c=4',
      'cdi.k8s.io/plugin_a': 'v.com/c=3',
      'other.io/x': 'not a device',
    });
    assert.deepEqual(devices, ['v.com/c=1', 'v.com/c=2', 'v.com/c=3', 'v.com/c=4']);
  });

  it('refuses malformed names with where they came from', () => {
    assert.throws(() => requestedDevices(['gpu0'], {}), (e: Error & { kind?: string }) => e.kind === 'InvalidArgument' && /config\.CDI_devices: unqualified device "gpu0"/.test(e.message));
    assert.throws(() => requestedDevices([], { 'cdi.k8s.io/p': 'v.com/c=1,' }), /annotation "cdi\.k8s\.io\/p": unqualified device ""/);
  });
});
