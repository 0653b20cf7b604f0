/** Pod files without the shm mount (which needs root): paths, resolv.conf text, hostname and hosts. */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DNSConfig, Protocol } from '../../../src/gen/runtime/v1/api.js';
import { ownsShm, podFilePaths, resolvConfFor, writePodFiles } from '../../../src/sandbox/pod-files.js';
import { portMappings } from '../../../src/sandbox/pod-config.js';
import { throwsKind } from '../oci/helpers.js';
import { sysctlPath } from '../../../src/sandbox/host.js';

describe('pod files', () => {
  it('puts the files in the state dir; host IPC shares /dev/shm, which is never Stove\'s to unmount', () => {
    const own = podFilePaths('/run/stove/sandboxes/abc', false);
    assert.deepEqual(own, {
      hostnamePath: '/run/stove/sandboxes/abc/hostname',
      resolvConfPath: '/run/stove/sandboxes/abc/resolv.conf',
      hostsPath: '/run/stove/sandboxes/abc/hosts',
      shmPath: '/run/stove/sandboxes/abc/shm',
    });
    assert.equal(ownsShm(own), true);
    const host = podFilePaths('/run/stove/sandboxes/abc', true);
    assert.equal(host.shmPath, '/dev/shm');
    assert.equal(ownsShm(host), false);
  });

  it('writes resolv.conf from DNSConfig (search, nameservers, options) and otherwise copies the host\'s', async () => {
    assert.equal(resolvConfFor(undefined), undefined);
    assert.equal(resolvConfFor(DNSConfig.fromPartial({})), undefined);
    assert.equal(
      resolvConfFor(DNSConfig.fromPartial({ servers: ['10.0.0.10', '10.0.0.11'], searches: ['ns.svc.cluster.local', 'svc.cluster.local'], options: ['ndots:5', 'edns0'] })),
      'search ns.svc.cluster.local svc.cluster.local\nnameserver 10.0.0.10\nnameserver 10.0.0.11\noptions ndots:5 edns0\n',
    );
    const dir = await mkdtemp(join(tmpdir(), 'stove-podfiles-'));
    try {
      const files = podFilePaths(dir, true);
      await writePodFiles(files, 'web-0', DNSConfig.fromPartial({ servers: ['1.2.3.4'] }));
      assert.equal(await readFile(files.hostnamePath, 'utf8'), 'web-0\n');
      assert.equal(await readFile(files.resolvConfPath, 'utf8'), 'nameserver 1.2.3.4\n');
      assert.equal(await readFile(files.hostsPath, 'utf8'), await readFile('/etc/hosts', 'utf8').catch(() => '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n'));
      await writePodFiles(files, 'web-0', undefined);
      assert.equal(await readFile(files.resolvConfPath, 'utf8'), await readFile('/etc/resolv.conf', 'utf8').catch(() => ''));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('finds a sysctl under /proc/sys, keeping dots inside device names', () => {
    assert.equal(sysctlPath('net.ipv4.ip_local_port_range'), '/proc/sys/net/ipv4/ip_local_port_range');
    assert.equal(sysctlPath('net.ipv4.conf.eth0/100.rp_filter'), '/proc/sys/net/ipv4/conf/eth0.100/rp_filter');
  });

  it('turns CRI port mappings into CNI portMappings, skipping those without a host port', () => {
    assert.deepEqual(
      portMappings([
        { protocol: Protocol.TCP, containerPort: 80, hostPort: 8080, hostIp: '' },
        { protocol: Protocol.UDP, containerPort: 53, hostPort: 5353, hostIp: '127.0.0.1' },
        { protocol: Protocol.SCTP, containerPort: 9, hostPort: 0, hostIp: '' },
      ]),
      [
        { hostPort: 8080, containerPort: 80, protocol: 'tcp' },
        { hostPort: 5353, containerPort: 53, protocol: 'udp', hostIp: '127.0.0.1' },
      ],
    );
    throwsKind(() => portMappings([{ protocol: Protocol.TCP, containerPort: 80, hostPort: 70000, hostIp: '' }]), 'InvalidArgument', /port_mappings\[0\]\.host_port/);
    throwsKind(() => portMappings([{ protocol: 7 as Protocol, containerPort: 80, hostPort: 80, hostIp: '' }]), 'InvalidArgument', /port_mappings\[0\]\.protocol/);
  });
});
