/**
 * The real `crictl` against `stove serve`: the container commands an operator types. Skipped (with the
 * reason printed) where crictl is not installed, as on CI machines.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { suiteHooks } from '../../helpers/suite.js';
import { ContainerWorld, eventually, skipReason } from './world.js';

const CRICTL = process.env.CRICTL ?? '/usr/local/bin/crictl';

describe('containers: crictl by hand', function () {
  this.timeout(60_000);
  const world = new ContainerWorld();
  let crictl: (...args: string[]) => Promise<string>;
  let podJson: string;
  let ctrJson: string;

  suiteHooks({
    what: 'crictl tests',
    skipReason: () => skipReason() ?? (existsSync(CRICTL) ? undefined : `${CRICTL} is not installed`),
    setup,
    cleanup: () => world.cleanup(),
  });

  async function setup(): Promise<void> {
    await world.start();
    const endpoint = `unix://${world.daemon.socket}`;
    crictl = async (...args: string[]) => {
      const r = await execa(CRICTL, ['--runtime-endpoint', endpoint, '--image-endpoint', endpoint, '--timeout', '30s', ...args], { reject: false });
      if (r.exitCode !== 0) throw new Error(`crictl ${args.join(' ')} failed (${r.exitCode}): ${r.stderr}`);
      return r.stdout.trim();
    };
    podJson = join(world.daemon.dir, 'pod.json');
    ctrJson = join(world.daemon.dir, 'ctr.json');
    await writeFile(
      podJson,
      JSON.stringify({ metadata: { name: 'crictl-pod', namespace: 'default', uid: 'crictl-uid', attempt: 0 }, log_directory: join(world.daemon.dir, 'logs', 'crictl-pod'), linux: {} }),
    );
    await writeFile(
      ctrJson,
      JSON.stringify({
        metadata: { name: 'ticker' },
        image: { image: world.image('busybox').reference },
        command: ['sh', '-c', 'i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done'],
        log_path: 'ticker.log',
        linux: {},
      }),
    );
  }

  it('run, ps, inspect, logs, exec -s, stats, update, stop, rm', async () => {
    const id = (await crictl('run', '--no-pull', ctrJson, podJson)).split('\n').pop()!;
    assert.match(id, /^[0-9a-f]{64}$/);
    const ps = await crictl('ps', '--id', id);
    assert.match(ps, /ticker\s+0\s+[0-9a-f]{13}/);
    assert.match(ps, /Running/);
    const inspect = JSON.parse(await crictl('inspect', id)) as { status: { state: string }; info: { pid: number; runtimeSpec: { process: { args: string[] } } } };
    assert.equal(inspect.status.state, 'CONTAINER_RUNNING');
    assert.ok(inspect.info.pid > 0);
    assert.equal(inspect.info.runtimeSpec.process.args[0], 'sh');
    await eventually('log lines', async () => (await crictl('logs', id)).includes('tick 2'));
    // logs -f follows the file until the container stops.
    const follow = execa(CRICTL, ['--runtime-endpoint', `unix://${world.daemon.socket}`, 'logs', '-f', id], { reject: false });
    assert.equal(await crictl('exec', '-s', id, 'echo', 'from-exec'), 'from-exec');
    const stats = await crictl('stats', '--id', id, '-o', 'json');
    assert.ok((JSON.parse(stats) as { stats: unknown[] }).stats.length === 1);
    await crictl('update', '--memory', String(96 << 20), id);
    const updated = JSON.parse(await crictl('inspect', id)) as { status: { resources: { linux: { memoryLimitInBytes: string } } } };
    assert.equal(updated.status.resources.linux.memoryLimitInBytes, String(96 << 20));
    await crictl('stop', '-t', '1', id);
    const followed = await follow;
    assert.match(followed.stdout, /tick 0\n/);
    assert.match(await crictl('ps', '-a', '--id', id), /Exited/);
    await crictl('rm', id);
    assert.equal(await crictl('ps', '-a', '-q'), '');
    // create + start as separate steps in the pod crictl run made.
    const pod = await crictl('pods', '-q', '--name', 'crictl-pod');
    const second = await crictl('create', pod, ctrJson, podJson);
    await crictl('start', second);
    assert.match(await crictl('ps', '-q'), new RegExp(second));
    await crictl('rmp', '-f', pod);
    assert.equal(await crictl('ps', '-a', '-q'), '');
    assert.deepEqual(await world.leftovers(), []);
  });
});
