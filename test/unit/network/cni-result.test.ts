import assert from 'node:assert/strict';
import { compareVersions, convertResult, podIps, versionAtLeast } from '../../../src/network/cni-result.js';

const v100 = {
  cniVersion: '1.0.0',
  interfaces: [
    { name: 'cni0', mac: 'aa:aa:aa:aa:aa:aa' },
    { name: 'veth1', mac: 'bb:bb:bb:bb:bb:bb' },
    { name: 'eth0', mac: 'cc:cc:cc:cc:cc:cc', sandbox: '/run/netns/x' },
  ],
  ips: [
    { interface: 2, address: 'fd00::5/64', gateway: 'fd00::1' },
    { interface: 2, address: '10.88.0.5/16', gateway: '10.88.0.1' },
    { interface: 0, address: '10.88.0.1/16' },
  ],
  routes: [{ dst: '0.0.0.0/0' }],
  dns: {},
};

describe('network/cni-result', () => {
  it('compares versions numerically', () => {
    assert.ok(compareVersions('0.10.0', '0.4.0') > 0);
    assert.ok(versionAtLeast('1.0.0', '0.4.0'));
    assert.ok(!versionAtLeast('0.3.1', '0.4.0'));
    assert.equal(compareVersions('1.0.0', '1.0.0'), 0);
  });

  it('adds the ips version field going to 0.4.0 and drops it going to 1.0.0', () => {
    const old = convertResult(v100, '0.4.0');
    assert.equal(old.cniVersion, '0.4.0');
    assert.deepEqual(
      old.ips!.map((ip) => ip.version),
      ['6', '4', '4'],
    );
    assert.deepEqual(old.interfaces, v100.interfaces);
    const back = convertResult(old, '1.0.0');
    assert.deepEqual(back, v100);
    assert.equal(v100.ips[0]!.hasOwnProperty('version'), false, 'the input is not modified');
  });

  it('lifts 0.2.0 results (ip4/ip6) into the rich shape', () => {
    const r = convertResult(
      {
        cniVersion: '0.2.0',
        ip4: { ip: '10.1.0.7/24', gateway: '10.1.0.1', routes: [{ dst: '0.0.0.0/0' }] },
        ip6: { ip: 'fd01::7/64' },
        dns: { nameservers: ['10.1.0.1'] },
      },
      '0.3.1',
    );
    assert.deepEqual(r, {
      cniVersion: '0.3.1',
      ips: [
        { version: '4', address: '10.1.0.7/24', gateway: '10.1.0.1' },
        { version: '6', address: 'fd01::7/64' },
      ],
      routes: [{ dst: '0.0.0.0/0' }],
      dns: { nameservers: ['10.1.0.1'] },
    });
  });

  it('leaves results alone when asked for a pre-0.3.0 version and rejects non-objects', () => {
    const legacy = { cniVersion: '0.2.0', ip4: { ip: '10.1.0.7/24' } };
    assert.equal(convertResult(legacy, '0.2.0'), legacy);
    assert.throws(() => convertResult('nope', '1.0.0'), /not a JSON object/);
  });

  it('picks the pod IPs of eth0, the first IPv4 as primary', () => {
    assert.deepEqual(podIps(v100, 'eth0'), ['10.88.0.5', 'fd00::5']);
    assert.deepEqual(podIps({ cniVersion: '1.0.0', ips: [{ address: '10.0.0.3/8' }] }, 'eth0'), ['10.0.0.3']);
    assert.deepEqual(podIps({ cniVersion: '1.0.0' }, 'eth0'), []);
    assert.deepEqual(
      podIps({ cniVersion: '1.0.0', ips: [{ address: 'fd00::1/64' }, { address: 'fd00::2/64' }, { address: '10.0.0.9/8' }, { address: '10.0.0.8/8' }] }, 'eth0'),
      ['10.0.0.9', 'fd00::1', 'fd00::2', '10.0.0.8'],
    );
  });
});
