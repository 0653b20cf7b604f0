/**
 * What a burst of pod + container lifecycles must not leave in the daemon (real runc, conmon and CNI):
 * every fd a lifecycle opens (the pause process's stat fd, conmon's pipes and sockets, log and exit
 * files, the spawn helper's sessions) is closed again, so a node that has run thousands of pods holds
 * as many as one that has run a few. bench/memory.ts measures the same over 1000 lifecycles, with the
 * memory.
 */
import assert from 'node:assert/strict';
import { readdir, readFile, readlink } from 'node:fs/promises';
import { MAX_MOUNT_HELPERS } from '../../../src/platform/mount-helper.js';
import { containerSuite, ContainerWorld, eventually } from './world.js';

/** The daemon's open fds, by what they point at (`socket:[…]` and `pipe:[…]` with their inode). */
async function openFds(pid: number): Promise<string[]> {
  const dir = `/proc/${pid}/fd`;
  const fds = await readdir(dir);
  return Promise.all(fds.map(async (fd) => `${fd} → ${await readlink(`${dir}/${fd}`).catch(() => '(closed)')}`));
}

/**
 * The daemon's mount helpers: a pool that grows to the most mounts in flight at once (at most
 * MAX_MOUNT_HELPERS) and lives as long as the daemon, each holding two of its fds (stdin and stdout).
 */
async function mountHelpers(pid: number): Promise<number> {
  const tasks = await readdir(`/proc/${pid}/task`);
  const children = (await Promise.all(tasks.map((t) => readFile(`/proc/${pid}/task/${t}/children`, 'utf8').catch(() => ''))))
    .flatMap((list) => list.split(' ').filter(Boolean));
  const names = await Promise.all(children.map((child) => readFile(`/proc/${child}/comm`, 'utf8').catch(() => '')));
  return names.filter((name) => name.trim() === 'stove-mount-hel').length;
}

describe('containers: the daemon after a burst of lifecycles (real runc, conmon and CNI)', function () {
  this.timeout(180_000);
  const world = new ContainerWorld();

  containerSuite(world, 'steady-state tests', { scope: 'pods' });

  async function lifecycle(): Promise<void> {
    const rt = world.daemon.clients.runtime;
    const pod = await world.pod();
    const id = await world.run(pod, world.config('sleeper'));
    // As a kubelet polls them: the pod's status holds an fd on its pause process until the pod stops.
    await world.pods.status(pod.id);
    await world.status(id);
    await rt.stopContainer({ containerId: id, timeout: 0n });
    await rt.removeContainer({ containerId: id });
    await rt.stopPodSandbox({ podSandboxId: pod.id });
    await rt.removePodSandbox({ podSandboxId: pod.id });
  }

  it('holds no more fds after 20 pod + container lifecycles, 4 at a time, than after the first 4', async () => {
    const pid = world.daemon.child.pid!;
    // The first lifecycles start what lives as long as the daemon (the spawn helper, the exit watch).
    await Promise.all(Array.from({ length: 4 }, lifecycle));
    const before = await openFds(pid);
    const helpersBefore = await mountHelpers(pid);
    for (let round = 0; round < 5; round++) await Promise.all(Array.from({ length: 4 }, lifecycle));
    // Closes that trail the last answers (a conmon's pipes at its exit) may take a moment. The mount
    // helper pool may have grown to the burst's peak of mounts in flight (bounded): its two fds per
    // helper are counted apart.
    let after: string[] = [];
    let helpersAfter = 0;
    await eventually(
      'the daemon to hold no more fds than before the burst, apart from a larger mount helper pool',
      async () => {
        after = await openFds(pid);
        helpersAfter = await mountHelpers(pid);
        return after.length - 2 * helpersAfter <= before.length - 2 * helpersBefore;
      },
      10_000,
    ).catch(() => {
      const added = after.filter((fd) => !before.includes(fd));
      assert.fail(
        `${after.length} fds after the burst with ${helpersAfter} mount helpers, ${before.length} before with ${helpersBefore}; new: ${added.join(', ')}`,
      );
    });
    assert.ok(helpersAfter <= MAX_MOUNT_HELPERS, `${helpersAfter} mount helpers, more than the pool's ${MAX_MOUNT_HELPERS}`);
  });
});
