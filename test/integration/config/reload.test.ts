/**
 * Node defaults and a live config reload against a real `stove serve`: default ulimits and the pids
 * limit seen in real containers, then SIGHUP with drop-ins — a new mirror used by the next pull, pinned
 * images reported, new limits for new containers while running ones keep theirs — and a broken drop-in
 * that changes nothing while the daemon keeps answering.
 */
import assert from 'node:assert/strict';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ContainerWorld, containerSuite, eventually } from '../container/world.js';
import { cgroupDirs, detectCgroups } from '../../../src/platform/cgroups.js';
import { ImageStatusRequest, PullImageRequest } from '../../../src/gen/runtime/v1/api.js';

describe('config: node defaults and live reload (SIGHUP)', function () {
  this.timeout(120_000);
  const world = new ContainerWorld();
  world.pods.runtimeToml = ['default_ulimits = ["nofile=1024:2048", "nproc=500:600"]', 'pids_limit = 77'];
  containerSuite(world, 'config reload tests', { scope: 'pods' });

  /**
   * The container's RLIMIT_NOFILE and RLIMIT_NPROC (`soft hard`), as its init process has them, and its
   * pids.max. Read from /proc on the host: runc 1.1 applies an exec's rlimits from outside while the
   * exec'd Go init may still raise its soft open-file limit, so an exec is no witness.
   */
  async function limitsOf(id: string): Promise<{ nofile: string; nproc: string; pidsMax: string }> {
    const info = await world.info(id);
    const limits = await readFile(`/proc/${info.pid}/limits`, 'utf8');
    const row = (name: string) => {
      const cols = limits.split('\n').find((l) => l.startsWith(name))!.slice(name.length).trim().split(/\s+/);
      return `${cols[0]} ${cols[1]}`;
    };
    const layout = await detectCgroups();
    const dirs = cgroupDirs(layout, info.cgroupsPath);
    const dir = layout.version === 2 ? dirs.unified! : dirs.pids!;
    return { nofile: row('Max open files'), nproc: row('Max processes'), pidsMax: (await readFile(join(dir, 'pids.max'), 'utf8')).trim() };
  }

  /** Sends SIGHUP and waits for the daemon's log line that says how the reload went. */
  async function reload(expect: RegExp): Promise<string> {
    const before = world.daemon.output().length;
    world.daemon.child.kill('SIGHUP');
    let line = '';
    await eventually('the reload log line', async () => {
      line = world.daemon.output().slice(before).split('\n').find((l) => expect.test(l)) ?? '';
      return line !== '';
    }, 10_000);
    return line;
  }

  it('applies runtime.default_ulimits and runtime.pids_limit to containers', async () => {
    const pod = await world.pod();
    const id = await world.run(pod, world.config('sleeper'));
    assert.deepEqual(await limitsOf(id), { nofile: '1024 2048', nproc: '500 600', pidsMax: '77' });
  });

  it('reloads drop-ins on SIGHUP for new work, leaving running containers as they are', async () => {
    const pod = await world.pod();
    const old = await world.run(pod, world.config('sleeper'));
    const busybox = world.image('busybox');
    const mirrored = `mirror-only.invalid/${busybox.reference.split('/').slice(1).join('/')}`;
    const image = world.daemon.clients.image;
    await assert.rejects(image.pullImage(PullImageRequest.fromPartial({ image: { image: mirrored } })), 'no mirror yet: the name does not resolve');
    assert.equal((await image.imageStatus(ImageStatusRequest.fromPartial({ image: { image: busybox.reference } }))).image!.pinned, false);

    const dropIn = join(world.daemon.configDir, '10-node.toml');
    await writeFile(
      dropIn,
      [
        '[runtime]',
        'default_ulimits = ["nofile=4096:8192"]',
        'pids_limit = 99',
        '[images]',
        `pinned = ["${busybox.reference.split(':')[0]}:*"]`,
        '[registries."mirror-only.invalid"]',
        `mirrors = ["http://${world.registry.host}"]`,
        '',
      ].join('\n'),
    );
    try {
    const line = await reload(/configuration reloaded/);
    assert.match(line, /10-node\.toml/);
    assert.match(line, /images\.pinned/);

    const pulled = await image.pullImage(PullImageRequest.fromPartial({ image: { image: mirrored } }));
    assert.equal(pulled.imageRef, busybox.configDigest, 'the new mirror served the next pull');
    assert.equal((await image.imageStatus(ImageStatusRequest.fromPartial({ image: { image: busybox.reference } }))).image!.pinned, true);
    const listed = (await image.listImages({ filter: undefined })).images.find((i) => i.id === busybox.configDigest)!;
    assert.equal(listed.pinned, true);

    const fresh = await world.run(pod, world.config('sleeper'));
    const limits = await limitsOf(fresh);
    assert.equal(limits.nofile, '4096 8192');
    assert.equal(limits.pidsMax, '99');
    assert.notEqual(limits.nproc, '500 600', 'the drop-in list replaced the main file\'s, it was not appended to');
    assert.deepEqual(await limitsOf(old), { nofile: '1024 2048', nproc: '500 600', pidsMax: '77' }, 'a running container is not touched');
    } finally {
      await rm(dropIn, { force: true });
      await reload(/configuration reloaded/);
    }
  });

  it('keeps the current config when a drop-in is broken, naming the file and key, and keeps serving', async () => {
    const good = join(world.daemon.configDir, '20-pids.toml');
    const broken = join(world.daemon.configDir, '90-broken.toml');
    await writeFile(good, '[runtime]\npids_limit = 55\n');
    try {
      await reload(/configuration reloaded/);
      await writeFile(broken, '[runtime]\npids_limitt = 5\n');
      const line = await reload(/config reload failed/);
      assert.match(line, /90-broken\.toml: unknown key \\"runtime\.pids_limitt\\"/);
      const version = await world.daemon.clients.runtime.version({ version: 'v1' });
      assert.equal(version.runtimeName, 'stove', 'the daemon still answers');
      const pod = await world.pod();
      const id = await world.run(pod, world.config('sleeper'));
      assert.equal((await limitsOf(id)).pidsMax, '55', 'the last good config still applies');
    } finally {
      await rm(broken, { force: true });
      await rm(good, { force: true });
      await reload(/configuration reloaded/);
    }
  });
});
