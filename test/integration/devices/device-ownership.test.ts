/**
 * `runtime.device_ownership_from_security_context` in real runc containers, with a device node made
 * for the test (a character device with the numbers of /dev/zero, owned 4242:4343 on the host): off
 * (the default, as containerd and CRI-O) the container's node has the host's owner; on, a non-zero
 * runAsUser/runAsGroup owns it (each only where set), root leaves the host's, and a privileged
 * container's host devices keep theirs, as in both peers.
 */
import assert from 'node:assert/strict';
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { ContainerWorld, containerSuite } from '../container/world.js';

describe('devices: device ownership from the security context (real runc containers)', function () {
  this.timeout(120_000);
  const world = new ContainerWorld();
  let dir: string;
  let node: string;
  let pod: Awaited<ReturnType<ContainerWorld['pod']>>;
  let privilegedPod: Awaited<ReturnType<ContainerWorld['pod']>>;

  containerSuite(world, 'device ownership tests', {
    scope: 'containers',
    setup: async () => {
      dir = await mkdtemp(join(tmpdir(), 'stove-devown-'));
      node = join(dir, 'zero');
      await execa('mknod', ['-m', '0660', node, 'c', '1', '5']);
      await chown(node, 4242, 4343);
      pod = await world.pod();
      privilegedPod = await world.pod({ linux: { securityContext: { privileged: true } } });
    },
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const device = { containerPath: '/dev/owned', hostPath: '', permissions: 'rw' };
  const owners = async (id: string, paths: string) => (await world.exec(id, ['sh', '-c', `stat -c %u:%g ${paths}`])).stdout;
  const run = (p: typeof pod, securityContext: Record<string, unknown>) =>
    world.run(p, world.config('sleeper', { devices: [{ ...device, hostPath: node }], linux: { securityContext } }));

  it('off (the default): the node has the host owner whatever the container runs as', async () => {
    const id = await run(pod, { runAsUser: { value: 1000n }, runAsGroup: { value: 2000n } });
    assert.equal(await owners(id, '/dev/owned'), '4242:4343\n');
    // Mode 0660 of another owner: the container's user cannot open it (what the option is for).
    assert.match((await world.exec(id, ['sh', '-c', 'head -c 4 /dev/owned 2>&1; true'])).stdout, /Permission denied/);
  });

  describe('on', () => {
    before(async () => {
      world.pods.runtimeToml = ['device_ownership_from_security_context = true'];
      await world.pods.restart('SIGTERM');
    });
    after(async () => {
      world.pods.runtimeToml = [];
      await world.pods.restart('SIGTERM');
    });

    it('gives CRI devices the runAsUser and runAsGroup, each where set and not 0', async () => {
      const both = await run(pod, { runAsUser: { value: 1000n }, runAsGroup: { value: 2000n } });
      assert.equal(await owners(both, '/dev/owned'), '1000:2000\n');
      // runAsUser 1000 can open it for reading and writing (mode 0660, its owner).
      assert.equal((await world.exec(both, ['sh', '-c', 'head -c 2 /dev/owned | od -An -tx1 && echo x > /dev/owned && echo ok'])).stdout.trim(), '00 00\nok');
      const userOnly = await run(pod, { runAsUser: { value: 1000n } });
      assert.equal(await owners(userOnly, '/dev/owned'), '1000:4343\n');
      const root = await run(pod, { runAsUser: { value: 0n } });
      assert.equal(await owners(root, '/dev/owned'), '4242:4343\n');
    });

    it("leaves a privileged container's host devices as on the host", async () => {
      const id = await run(privilegedPod, { privileged: true, runAsUser: { value: 1000n }, runAsGroup: { value: 2000n } });
      assert.equal(await owners(id, '/dev/owned /dev/zero /dev/full'), '1000:2000\n0:0\n0:0\n');
    });
  });
});
