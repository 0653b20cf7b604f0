/**
 * The CRI conformance suite's user namespace spec (critest "UserNamespaces … runtime should support
 * NamespaceMode_POD"), checked through the CRI against a real daemon so that CI, which has no critest,
 * guards it: a container in a pod with its own user namespace must be created (it joins the pod's
 * network namespace after its user namespace, so that netns must belong to the pod's user namespace)
 * and print the pod's uid map. Beyond the spec: the container's root owns its root filesystem (the
 * runtime made mount points in it and the process writes to it), the image's set-user-ID bits and
 * file capabilities survive, and the pod is reachable on its IP.
 */
import assert from 'node:assert/strict';
import { chmod, readFile, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { execa } from 'execa';
import { NamespaceMode } from '../../../src/gen/runtime/v1/api.js';
import { pushBusyboxImage } from '../../helpers/image-builder.js';
import { containerSuite, ContainerWorld, rejectsWith } from '../container/world.js';
import { waitFor } from '../../helpers/wait.js';
import { testRuntimeFeatures } from '../../helpers/oci-runtime.js';

const require = createRequire(import.meta.url);
const xattr = require('@napi-rs/xattr') as { getAttribute(path: string, name: string): Promise<Buffer | null> };

/** critest maps 0 → 1000 for 100000 ids; the same shape on a range no other test uses. */
const HOST_BASE = 700000;
const LENGTH = 100000;
const mapping = [{ containerId: 0, hostId: HOST_BASE, length: LENGTH }];
const userns = { mode: NamespaceMode.POD, uids: mapping, gids: mapping };

/** A v2 `security.capability` value granting CAP_NET_RAW (as `setcap cap_net_raw+ep`). */
function netRawCaps(): Buffer {
  const b = Buffer.alloc(20);
  b.writeUInt32LE(0x02000001, 0);
  b.writeUInt32LE(1 << 13, 4);
  return b;
}

describe('conformance: containers in a pod with its own user namespace (real runc, conmon and CNI)', function () {
  this.timeout(90_000);
  const world = new ContainerWorld();
  let image = '';

  containerSuite(world, 'user namespace conformance tests', { scope: 'pods', setup });

  async function setup(): Promise<void> {
    const pushed = await pushBusyboxImage(world.registry, 'conformance/userns:1', {
      extraFiles: [
        { path: 'usr/local/bin/setuid-tool', content: '#!/bin/sh\n', mode: 0o4755 },
        { path: 'usr/local/bin/pinger', content: 'x', mode: 0o755, xattrs: { 'security.capability': netRawCaps() } },
        { type: 'dir', path: 'home/app', uid: 1000, gid: 1000, mode: 0o750 },
      ],
    });
    image = pushed.reference;
    world.images.set('userns', pushed);
    await world.runtime.pull(image);
  }

  it('runs a container that joins the pod user and network namespaces and sees the pod uid map', async () => {
    const pod = await world.pod({ linux: { securityContext: { namespaceOptions: { usernsOptions: userns } } } });
    const script = [
      'cat /proc/self/uid_map',
      'touch /made-by-root && echo wrote-rootfs',
      'stat -c "%u:%g %a %n" /usr/local/bin/setuid-tool /home/app',
      'sleep 3600',
    ].join('; ');
    const config = world.config('userns', {
      command: ['sh', '-c', script],
      linux: { securityContext: { namespaceOptions: { usernsOptions: userns } } },
    });
    // The test daemon lives in a 0700 temp dir: the pod's root (an unprivileged host uid) could not
    // reach the root filesystem, and Stove says so before the runtime fails with a bare EACCES.
    await chmod(world.daemon.dir, 0o700);
    await rejectsWith(world.create(pod, config), 'FAILED_PRECONDITION', /"[^"]+" \(mode 0700\) does not let other users through/);
    await chmod(world.daemon.dir, 0o711);
    const id = await world.run(pod, config);
    const logPath = join(pod.config.logDirectory, config.logPath);
    // Four lines: the uid map, wrote-rootfs and the two stat lines.
    const lines = await waitFor('the four lines of the script', async () => {
      const texts = (await world.logLines(logPath)).map((l) => l.text);
      return texts.length >= 4 ? texts : undefined;
    }, 10_000);
    // critest's check: `\s+0\s+1000\s+100000\n` in the container's stdout.
    assert.match(lines[0] ?? '', new RegExp(`^\\s+0\\s+${HOST_BASE}\\s+${LENGTH}$`), lines.join('\n'));
    assert.ok(lines.includes('wrote-rootfs'), `root writes its root filesystem: ${lines.join('\n')}`);
    assert.ok(lines.includes('0:0 4755 /usr/local/bin/setuid-tool'), lines.join('\n'));
    assert.ok(lines.includes('1000:1000 750 /home/app'), lines.join('\n'));

    // Host view: the process runs as the mapped root; its files are owned by the mapped ids.
    const info = await world.info(id);
    const status = await readFile(`/proc/${info.pid}/status`, 'utf8');
    assert.match(status, new RegExp(`^Uid:\\s+${HOST_BASE}\\s`, 'm'));
    const hostFile = join(`/proc/${info.pid}/root`, 'usr/local/bin/pinger');
    assert.equal((await stat(hostFile)).uid, HOST_BASE);
    const caps = (await xattr.getAttribute(hostFile, 'security.capability'))!;
    assert.equal(caps.readUInt32LE(20), HOST_BASE, 'file capabilities owned by the pod root (v3)');

    // How the ids got there, as the runtime's `features` decide: with idmapped mounts the image's layers
    // are idmapped under the overlay and its writable layer holds only what the container wrote; without,
    // every file of the image was chowned on the overlay and sits in the writable layer as metadata.
    const idmapped = (await testRuntimeFeatures())?.linux?.mountExtensions?.idmap?.enabled === true;
    const rootMount = (await readFile(`/proc/${info.pid}/mountinfo`, 'utf8')).split('\n').find((l) => l.split(' ')[4] === '/')!;
    const upper = /(?:^|,)upperdir=([^,]+)/.exec(rootMount.split(' - ')[1]!.split(' ')[2]!)?.[1];
    assert.ok(upper, `an overlay with an upper dir at / of the container: ${rootMount}`);
    const inUpper = (path: string) => stat(join(upper, path)).then(() => true, () => false);
    assert.equal(await inUpper('made-by-root'), true, 'what the container wrote is in its writable layer');
    assert.equal(await inUpper('usr/local/bin/pinger'), !idmapped, `an image file ${idmapped ? 'stays in the idmapped layers' : 'is chowned into the writable layer'}`);
    if (idmapped) assert.match(rootMount, /lowerdir=idmapped\/0/, 'the overlay is on the idmapped layers');

    // The container shares the pause process's user and network namespaces.
    const podInfo = await world.pods.info(pod.id);
    for (const ns of ['user', 'net']) {
      assert.equal((await stat(`/proc/${info.pid}/ns/${ns}`)).ino, (await stat(`/proc/${podInfo.pid}/ns/${ns}`)).ino, ns);
    }
    assert.equal((await world.exec(id, ['id', '-u'])).stdout, '0\n');
    // No mount the runtime made in the container (its cgroup at /sys/fs/cgroup, inside the bind of the
    // host's /sys) propagated back to the host: crun 1.8.1 did that before /sys's bind was rslave.
    const leaked = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').filter((l) => l.includes(id) && / - cgroup2? /.test(l));
    assert.deepEqual(leaked, [], 'no cgroup mount of the container on the host');
    const ip = (await world.pods.status(pod.id)).status!.network!.ip;
    const ping = await execa('busybox', ['ping', '-c', '1', '-W', '2', ip], { reject: false, timeout: 10_000 });
    assert.equal(ping.exitCode, 0, `ping ${ip}: ${ping.stdout}`);
  });

  it('runs a pod with its own user namespace on the host network, as Status advertises (user_namespaces_host_network)', async () => {
    const features = (await world.daemon.clients.runtime.status({ verbose: false })).features!;
    assert.equal(features.userNamespacesHostNetwork, true);
    const pod = await world.pod({
      linux: { securityContext: { namespaceOptions: { usernsOptions: userns, network: NamespaceMode.NODE } } },
    });
    const id = await world.run(pod, world.config('userns', { command: ['sleep', '3600'], linux: { securityContext: { namespaceOptions: { usernsOptions: userns, network: NamespaceMode.NODE } } } }));
    const info = await world.info(id);
    // The node's network namespace, the pod's user namespace (root inside is the mapped host uid).
    assert.equal((await stat(`/proc/${info.pid}/ns/net`)).ino, (await stat('/proc/self/ns/net')).ino);
    assert.notEqual((await stat(`/proc/${info.pid}/ns/user`)).ino, (await stat('/proc/self/ns/user')).ino);
    assert.match(await readFile(`/proc/${info.pid}/status`, 'utf8'), new RegExp(`^Uid:\\s+${HOST_BASE}\\s`, 'm'));
    assert.equal((await world.exec(id, ['id', '-u'])).stdout, '0\n');
    // It sees the node's interfaces (through its own view of /sys, bound from the host). Other pods on
    // the node add and remove theirs meanwhile: what it sees lies between two host listings around it.
    const hostLinks = async () => new Set((await execa('ls', ['/sys/class/net'])).stdout.split('\n'));
    const before = await hostLinks();
    const seen = new Set((await world.exec(id, ['ls', '/sys/class/net'])).stdout.trim().split('\n'));
    const after = await hostLinks();
    const throughout = [...before].filter((link) => after.has(link));
    assert.ok(before.has('lo') && throughout.length > 1, `the host has interfaces besides lo: ${[...before].join(' ')}`);
    assert.deepEqual(throughout.filter((link) => !seen.has(link)), [], 'host interfaces it does not see');
    assert.deepEqual([...seen].filter((link) => !before.has(link) && !after.has(link)), [], 'interfaces it sees that the host has not');
  });
});
