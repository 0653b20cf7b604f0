/**
 * A CreateContainer interrupted by a SIGKILL of the daemon, as a kubelet then sees it: the daemon is
 * killed while conmon's `runc create` is held (an OCI runtime wrapper that waits on a gate file, then
 * runs the real runtime), after the container's log file was made and before its record was written,
 * then started again. The kubelet's CreateContainer failed; on its next sync it finds no container of
 * that name and, when none is in the runtime, takes the restart count from the log files beside it
 * (kubelet's calcRestartCountByLogDir: the highest `<n>.log` plus one). So the interrupted create must
 * leave no log file, or the kubelet's retry becomes attempt 1: a restart of a container that never ran
 * (found by the cluster's churn-with-faults test; containerd opens the log file only at StartContainer).
 * And the kubelet's side: a CreateContainer whose client left (a kubelet killed, or its deadline
 * passed) is removed again once made, so the kubelet finds no CREATED container to replace with
 * attempt 1 on its next sync.
 */
import assert from 'node:assert/strict';
import { chmod, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { execa } from 'execa';
import { Metadata } from '@grpc/grpc-js';
import { join } from 'node:path';
import { ContainerState, type ContainerConfig, type PodSandboxConfig } from '../../../src/gen/runtime/v1/api.js';
import { waitFor } from '../../helpers/wait.js';
import { TEST_RUNTIME } from '../../helpers/oci-runtime.js';
import { containerSuite, ContainerWorld } from './world.js';
import { conmonsUnder } from '../sandbox/world.js';

/** The restart count a kubelet gives a container it finds no trace of in the runtime (calcRestartCountByLogDir). */
async function kubeletRestartCount(logDir: string): Promise<number> {
  let count = 0;
  for (const name of await readdir(logDir).catch(() => [] as string[])) {
    const m = /^(\d+)\.log(\..*)?$/.exec(name);
    if (m) count = Math.max(count, Number(m[1]) + 1);
  }
  return count;
}

describe('containers: a CreateContainer interrupted by SIGKILL (real runc, conmon and CNI)', function () {
  this.timeout(120_000);
  const world = new ContainerWorld();
  const file = (name: string) => join(world.daemon.dir, name);

  containerSuite(world, 'interrupted-create tests', {
    scope: 'pods',
    setup: async () => {
      // The daemon again, its OCI runtime a wrapper that waits at `create` while the gate file exists (a
      // drop-in named to come after any other runtime drop-in).
      const wrapper = file('held-runc');
      await writeFile(
        wrapper,
        `#!/bin/sh\nfor a in "$@"; do\n  if [ "$a" = create ] && [ -e ${file('gate')} ]; then\n    : >${file('held')}\n    while [ -e ${file('gate')} ]; do sleep 0.05; done\n  fi\ndone\nexec ${TEST_RUNTIME} "$@"\n`,
      );
      await chmod(wrapper, 0o755);
      await writeFile(join(world.daemon.dir, 'stove.d', '99-held-runc.toml'), `[runtime]\nrunc = ${JSON.stringify(wrapper)}\n`);
      await world.pods.restart('SIGTERM');
    },
  });

  /** Runc's containers (the pods' and the held one's). */
  const runcContainers = async () => (await execa(TEST_RUNTIME, ['--root', join(world.daemon.state, 'runc'), 'list', '-q'])).stdout.split('\n').filter(Boolean);

  /**
   * CreateContainer of `config` held in runc create, the daemon SIGKILLed, the create let go on while
   * the daemon is down (conmon's runc create finishes), the daemon started again. Returns what the
   * client got.
   */
  async function interruptedCreate(pod: { id: string; config: PodSandboxConfig }, config: ContainerConfig, logDir: string): Promise<string> {
    await rm(file('held'), { force: true });
    await writeFile(file('gate'), '');
    const before = (await runcContainers()).length;
    const answer = world.create(pod, config).then(
      () => 'answered',
      (err: unknown) => String(err),
    );
    try {
      await waitFor('runc create held', async () => (await readdir(world.daemon.dir)).includes('held') || undefined, 30_000);
      // The create is past its log file and in conmon's runc create; no record yet.
      assert.ok((await readdir(logDir)).includes('0.log'), 'the log file is made before runc create');
      await world.daemon.stop('SIGKILL');
    } finally {
      await rm(file('gate'), { force: true });
    }
    await waitFor('the held runc create done', async () => ((await runcContainers()).length > before ? true : undefined), 30_000);
    await world.pods.restart('SIGKILL');
    return answer;
  }

  it('leaves no log file, no container and no conmon, so the retry is attempt 0 and runs', async () => {
    const pod = await world.pod();
    const logDir = join(pod.config.logDirectory, 'main');
    await mkdir(logDir, { recursive: true }); // the kubelet makes the container's log dir
    const config = world.config('sleeper', { metadata: { name: 'main', attempt: 0 }, logPath: 'main/0.log' });

    assert.match(await interruptedCreate(pod, config, logDir), /UNAVAILABLE/, 'the kubelet sees its CreateContainer fail');
    const rt = world.daemon.clients.runtime;
    assert.deepEqual((await rt.listContainers({ filter: undefined })).containers, [], 'the interrupted create left no container');
    assert.deepEqual(await readdir(logDir), [], 'the interrupted create left no log file');
    assert.equal(await kubeletRestartCount(logDir), 0, 'a kubelet retries as attempt 0');
    assert.equal((await conmonsUnder(world.daemon.dir)).length, 1, "the pod's conmon alone");
    assert.equal((await runcContainers()).length, 1, "the pod's runc container alone");

    // The kubelet's retry: the same name and attempt, created and started.
    const id = await world.run(pod, config);
    assert.equal((await world.status(id)).status!.state, ContainerState.CONTAINER_RUNNING);
    assert.deepEqual(await readdir(logDir), ['0.log']);
  });

  it('removes a container whose client left before it was created (a kubelet killed or timed out): its retry is attempt 0', async () => {
    const pod = await world.pod();
    const logDir = join(pod.config.logDirectory, 'main');
    await mkdir(logDir, { recursive: true });
    const config = world.config('sleeper', { metadata: { name: 'main', attempt: 0 }, logPath: 'main/0.log' });
    await rm(file('held'), { force: true });
    await writeFile(file('gate'), '');
    let code: number | undefined;
    try {
      // The raw client: a deadline, which passes while runc create is held (the stream is reset, as when a kubelet dies).
      const answered = new Promise<void>((resolve) => {
        world.daemon.clients.rawRuntime.createContainer({ podSandboxId: pod.id, config, sandboxConfig: pod.config }, new Metadata(), { deadline: Date.now() + 3000 }, (err) => {
          code = err?.code;
          resolve();
        });
      });
      await waitFor('runc create held', async () => (await readdir(world.daemon.dir)).includes('held') || undefined, 30_000);
      await answered;
    } finally {
      await rm(file('gate'), { force: true });
    }
    assert.equal(code, 4, 'DEADLINE_EXCEEDED for the client');
    // The create goes on once runc create is let go, then sees its client gone and undoes itself.
    await waitFor('the container removed again', async () => ((await runcContainers()).length === 1 && (await readdir(logDir)).length === 0 ? true : undefined), 30_000);
    assert.deepEqual((await world.daemon.clients.runtime.listContainers({ filter: undefined })).containers, [], 'no CREATED container for the kubelet to replace');
    assert.equal(await kubeletRestartCount(logDir), 0);
    assert.equal((await conmonsUnder(world.daemon.dir)).length, 1, "the pod's conmon alone");
    const id = await world.run(pod, config);
    assert.equal((await world.status(id)).status!.state, ContainerState.CONTAINER_RUNNING);
  });

  it('removes only an empty log file: one that holds output stays', async () => {
    const pod = await world.pod();
    const logDir = join(pod.config.logDirectory, 'main');
    await mkdir(logDir, { recursive: true });
    const line = '2026-01-01T00:00:00.000000000Z stdout F an earlier run\n';
    await writeFile(join(logDir, '0.log'), line);
    const config = world.config('sleeper', { metadata: { name: 'main', attempt: 0 }, logPath: 'main/0.log' });

    await interruptedCreate(pod, config, logDir);
    assert.deepEqual((await world.daemon.clients.runtime.listContainers({ filter: undefined })).containers, []);
    assert.equal(await readFile(join(logDir, '0.log'), 'utf8'), line, 'a log file with output is kept as it was');
  });
});
