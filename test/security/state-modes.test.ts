/**
 * Item 1 of the hardening: no unprivileged host user can list, read or execute anything under Stove's
 * root or state dirs that belongs to a container or an image (moby CVE-2021-41091: a set-user-ID-root
 * file a root container leaves in its writable layer, run from the host). Checked as `nobody` against
 * a real daemon, with the modes themselves; a user-namespaced pod's mapped root (and only it) still
 * passes through to its containers' root filesystems; a state tree an older Stove left wide open is
 * closed at start-up with its pods and containers still working.
 */
import assert from 'node:assert/strict';
import { chmod, lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { ContainerState, NamespaceMode } from '../../src/gen/runtime/v1/api.js';
import { startStove } from '../helpers/stove-process.js';
import { containerSuite, ContainerWorld, eventually } from '../integration/container/world.js';

const NOBODY = 65534;
/** A user-namespaced pod's mapping, on a range no other test uses. */
const HOST_BASE = 710000;
const mapping = [{ containerId: 0, hostId: HOST_BASE, length: 65536 }];
const userns = { mode: NamespaceMode.POD, uids: mapping, gids: mapping };

/**
 * Runs a command as uid:gid with no supplementary groups or capabilities. The command is exec'd by a
 * shell that already runs as that user (setpriv's own exec of the command is not what a user can do).
 */
function as(uid: number, gid: number, cmd: string[]) {
  const drop = [`--reuid=${uid}`, `--regid=${gid}`, '--clear-groups', '--inh-caps=-all', '--bounding-set=-all'];
  return execa('setpriv', [...drop, '--', '/bin/sh', '-c', 'exec "$@"', 'sh', ...cmd], { reject: false, timeout: 10_000 });
}

const modeOf = async (path: string) => (await lstat(path)).mode & 0o7777;

/** A root container that leaves a set-user-ID-root shell in its writable layer. */
const SUID_SCRIPT = 'cp /bin/busybox /suid-sh && chmod 4755 /suid-sh && sleep 3600';

describe('security: state trees are closed to unprivileged host users (real daemon, runc, conmon)', function () {
  this.timeout(90_000);
  const world = new ContainerWorld();

  containerSuite(world, 'state tree mode tests', { scope: 'pods' });

  /** The pod, a container with a set-user-ID file in its writable layer, and the paths around them. */
  async function suidContainer(podOptions = {}) {
    const pod = await world.pod(podOptions);
    const id = await world.run(pod, world.config('busybox', { command: ['sh', '-c', SUID_SCRIPT], ...podOptions }));
    const { root, state } = world.daemon;
    const upperFile = join(root, 'containers', id, 'fs', 'upper', 'suid-sh');
    await eventually('the set-user-ID file in the writable layer', async () => ((await lstat(upperFile)).mode & 0o4000) !== 0);
    return { pod, id, upperFile, bundle: join(state, 'containers', id), podState: join(state, 'sandboxes', pod.id) };
  }

  it('lets nobody list, read or execute records, layers, writable layers, bundles or pod files', async () => {
    const { pod, id, upperFile, bundle, podState } = await suidContainer();
    const { root, state } = world.daemon;
    const layer = (await readdir(join(root, 'images', 'layers'))).find((n) => !n.startsWith('.'))!;
    const record = (await readdir(join(root, 'images', 'records')))[0]!;

    // The control: nobody runs programs, so each refusal below is the tree's doing.
    assert.equal((await as(NOBODY, NOBODY, ['/bin/busybox', 'id', '-u'])).stdout, `${NOBODY}`);
    const attempts: [string, string[]][] = [
      ['list the root dir', ['ls', root]],
      ['list the containers', ['ls', join(root, 'containers')]],
      ['read a container record (its env)', ['cat', join(root, 'containers', id, 'container.json')]],
      ['read a pod record', ['cat', join(root, 'sandboxes', pod.id, 'sandbox.json')]],
      ['run the set-user-ID file in the writable layer', [upperFile, 'id', '-u']],
      ['run it through the mounted root filesystem', [join(bundle, 'rootfs', 'suid-sh'), 'id', '-u']],
      ['list the bundles', ['ls', join(state, 'containers')]],
      ['read a bundle config', ['cat', join(bundle, 'config.json')]],
      ['list the layers', ['ls', join(root, 'images', 'layers')]],
      ['run a layer file', [join(root, 'images', 'layers', layer, 'diff', 'bin', 'busybox'), 'true']],
      ['read an image record', ['cat', join(root, 'images', 'records', record)]],
      ['write into the pod shm', ['/bin/busybox', 'touch', join(podState, 'shm', 'planted')]],
      ['read the pod hosts file', ['cat', join(podState, 'hosts')]],
      ['list the netns pins', ['ls', join(state, 'netns')]],
      ["read the OCI runtime's state of the container", ['cat', join(state, 'runc', id, 'state.json')]],
    ];
    for (const [what, cmd] of attempts) {
      const r = await as(NOBODY, NOBODY, cmd);
      assert.notEqual(r.exitCode, 0, `nobody could ${what}: ${JSON.stringify([cmd, r.exitCode, r.stdout, r.stderr])}`);
      assert.doesNotMatch(r.stderr + r.stdout, /^0$/m, what);
    }

    const expected: [string, number][] = [
      [root, 0o700],
      [join(root, 'containers'), 0o700],
      [join(root, 'containers', id), 0o700],
      [join(root, 'containers', id, 'fs'), 0o700],
      [join(root, 'containers', id, 'container.json'), 0o600],
      [join(root, 'sandboxes', pod.id), 0o700],
      [join(root, 'sandboxes', pod.id, 'sandbox.json'), 0o600],
      [join(root, 'images'), 0o700],
      [join(root, 'images', 'records', record), 0o600],
      [join(root, 'images', 'layers', layer, 'layer.json'), 0o600],
      [state, 0o711],
      [join(state, 'containers'), 0o711],
      [bundle, 0o700],
      [podState, 0o700],
      [join(state, 'runc'), 0o700],
    ];
    for (const [path, mode] of expected) assert.equal((await modeOf(path)).toString(8), mode.toString(8), path);
  });

  it("gives a user-namespaced pod's root, and no one else, a way through to its containers' root filesystems", async () => {
    const ns = { linux: { securityContext: { namespaceOptions: { usernsOptions: userns } } } };
    const { id, bundle, podState } = await suidContainer(ns);
    assert.equal((await world.exec(id, ['id', '-u'])).stdout, '0\n');
    for (const dir of [bundle, podState]) {
      const st = await lstat(dir);
      assert.deepEqual([st.uid, st.gid, (st.mode & 0o7777).toString(8)], [0, HOST_BASE, '710'], dir);
    }
    const rootfs = join(bundle, 'rootfs', 'bin');
    assert.equal((await as(HOST_BASE, HOST_BASE, ['/bin/busybox', 'ls', '-d', rootfs])).exitCode, 0, "the pod's root passes through");
    assert.notEqual((await as(NOBODY, NOBODY, ['/bin/busybox', 'ls', '-d', rootfs])).exitCode, 0, 'nobody does not');
    assert.notEqual((await as(HOST_BASE + 1, HOST_BASE + 1, ['/bin/busybox', 'ls', '-d', rootfs])).exitCode, 0, 'nor another id of the pod');
  });

  it('closes the trees an older Stove left open at start-up, keeping pods and containers working', async () => {
    const plain = await suidContainer();
    const ns = { linux: { securityContext: { namespaceOptions: { usernsOptions: userns } } } };
    const userPod = await world.pod(ns);
    const { root, state, dir } = world.daemon;
    await world.daemon.stop('SIGKILL');
    // The modes an older Stove gave them.
    const wide: [string, number][] = [
      [root, 0o711],
      [join(root, 'containers'), 0o755],
      [join(root, 'containers', plain.id), 0o755],
      [join(root, 'containers', plain.id, 'fs'), 0o755],
      [join(root, 'containers', plain.id, 'container.json'), 0o644],
      [join(root, 'sandboxes'), 0o755],
      [join(root, 'sandboxes', plain.pod.id, 'sandbox.json'), 0o644],
      [join(root, 'images'), 0o711],
      [plain.bundle, 0o711],
      [plain.podState, 0o711],
      [join(state, 'sandboxes', userPod.id), 0o711],
      [join(state, 'netns'), 0o755],
    ];
    for (const [path, mode] of wide) await chmod(path, mode);
    world.pods.daemon = await startStove({ dir, configToml: world.pods.configToml() });

    assert.match(world.daemon.output(), /closed state dirs and records to unprivileged users/);
    for (const [path] of wide) {
      const want = path === root ? 0o700 : path === join(state, 'sandboxes', userPod.id) ? 0o710 : [plain.bundle, plain.podState].includes(path) ? 0o700 : null;
      const mode = await modeOf(path);
      if (want !== null) assert.equal(mode.toString(8), want.toString(8), path);
      assert.equal(mode & 0o077 & ~0o011, 0, `${path} is still readable by others (${mode.toString(8)})`);
    }
    assert.equal((await lstat(join(state, 'sandboxes', userPod.id))).gid, HOST_BASE);
    assert.notEqual((await as(NOBODY, NOBODY, [plain.upperFile, 'id', '-u'])).exitCode, 0);
    // The old container runs on; the user-namespaced pod takes a new container.
    assert.equal((await world.status(plain.id)).status!.state, ContainerState.CONTAINER_RUNNING);
    assert.equal((await world.exec(plain.id, ['id', '-u'])).stdout, '0\n');
    const fresh = await world.run(userPod, world.config('sleeper', ns));
    assert.equal((await world.exec(fresh, ['id', '-u'])).stdout, '0\n');
  });
});
