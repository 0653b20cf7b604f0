/**
 * A split image filesystem (KEP-4191): the images on one filesystem, the containers' writable layers
 * (`images.writable_layers_dir`) on another, each a tmpfs this suite mounts. ImageFsInfo reports both
 * apart, a container's writes land on the writable layers' filesystem, and a restarted daemon finds them.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, rm, stat, statfs } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { ContainerWorld, skipReason } from './world.js';
import { suiteHooks } from '../../helpers/suite.js';
import { mountPoints } from '../../../src/platform/mount.js';

const MiB = 1024 * 1024;

/** Bytes in use on the filesystem of `path`, as df counts them. */
async function usedBytes(path: string): Promise<number> {
  const s = await statfs(path);
  return (s.blocks - s.bfree) * s.bsize;
}

describe('containers: split image filesystem (images.writable_layers_dir)', function () {
  this.timeout(120_000);
  const world = new ContainerWorld();
  let dir = '';
  let imagesFs = '';
  let layersFs = '';

  const unmountOurs = async () => {
    const mounted = await mountPoints();
    for (const m of [layersFs, imagesFs]) if (m && mounted.has(m)) await execa('umount', ['-l', m], { reject: false });
  };

  suiteHooks({
    what: 'split image filesystem tests',
    skipReason,
    setup: async () => {
      dir = await mkdtemp(join(tmpdir(), 'stove-splitfs-'));
      imagesFs = join(dir, 'root');
      layersFs = join(dir, 'layers');
      for (const [path, size] of [[imagesFs, '256m'], [layersFs, '64m']] as const) {
        await mkdir(path);
        // 0755 like a fresh mount point: the daemon must close the writable layers' one.
        await execa('mount', ['-t', 'tmpfs', '-o', `size=${size},mode=0755`, 'tmpfs', path]);
      }
      world.pods.dir = dir;
      // The root is a small tmpfs: no free-space reserve for unpacking.
      world.pods.extraToml.push('[images]', `writable_layers_dir = "${layersFs}"`, 'min_free_space = 0');
      await world.start();
    },
    tidy: () => world.removeAll().catch(() => {}),
    leftovers: async () => {
      // The two tmpfs mounts are the suite's own, under the daemon's dir.
      const left = (await world.leftovers())
        .map((l) => (l.startsWith('mounts: ') ? 'mounts: ' + l.slice(8).split(' ').filter((m) => m !== imagesFs && m !== layersFs).join(' ') : l))
        .filter((l) => l !== 'mounts: ');
      const layers = await readdir(layersFs).catch(() => []);
      if (layers.length) left.push(`writable layers: ${layers.join(' ')}`);
      return left;
    },
    cleanup: async () => {
      await world.cleanup();
      await unmountOurs();
      if (dir) await rm(dir, { recursive: true, force: true });
    },
  });

  const fsInfo = () => world.daemon.clients.image.imageFsInfo({});

  it('reports the image store and the writable layers as two filesystems', async () => {
    const info = await fsInfo();
    assert.equal(info.imageFilesystems.length, 1);
    assert.equal(info.containerFilesystems.length, 1);
    const images = info.imageFilesystems[0]!;
    const containers = info.containerFilesystems[0]!;
    assert.equal(images.fsId!.mountpoint, join(imagesFs, 'images'));
    assert.equal(containers.fsId!.mountpoint, layersFs);
    // The pulled test images are on the images' tmpfs, and take about what it has in use (the usage
    // counts a block per directory, which tmpfs does not spend).
    const imageBytes = Number(images.usedBytes!.value);
    const onTmpfs = await usedBytes(imagesFs);
    assert.ok(imageBytes > MiB, `image usage ${imageBytes}`);
    assert.ok(imageBytes > onTmpfs * 0.5 && imageBytes < onTmpfs * 1.5, `image usage ${imageBytes}, the tmpfs has ${onTmpfs} in use`);
    assert.ok(images.inodesUsed!.value > 100n);
    assert.equal(containers.usedBytes!.value, 0n);
    assert.ok(images.timestamp > 0n && containers.timestamp > 0n);
    // Root's alone, whatever mode the mount point had.
    assert.equal((await stat(layersFs)).mode & 0o7777, 0o700);
  });

  it("puts a container's writes on the writable layers' filesystem, and its root filesystem works", async () => {
    const pod = await world.pod();
    const id = await world.run(pod, world.config('sleeper'));
    const imagesBefore = await usedBytes(imagesFs);
    const layersBefore = await usedBytes(layersFs);

    const write = await world.exec(id, ['sh', '-c', 'dd if=/dev/urandom of=/big bs=1M count=8 2>/dev/null && echo hi > /etc/motd && cat /etc/motd && head -1 /etc/passwd']);
    assert.equal(write.exitCode, 0, write.stderr);
    assert.equal(write.stdout, 'hi\nroot:x:0:0:root:/root:/bin/sh\n');

    // The layer is `<writable layers dir>/<id>/{upper,work}`, root's alone; upper keeps the mode of `/`.
    const layer = join(layersFs, id);
    assert.equal((await stat(layer)).mode & 0o7777, 0o700);
    assert.equal((await stat(join(layer, 'upper', 'big'))).size, 8 * MiB);
    assert.deepEqual((await readdir(layer)).sort(), ['upper', 'work']);
    assert.ok((await usedBytes(layersFs)) - layersBefore >= 8 * MiB);
    assert.ok((await usedBytes(imagesFs)) - imagesBefore < MiB, 'the image store grew');
    // Nothing of the layer beside the container's record.
    assert.ok(!(await readdir(join(world.daemon.root, 'containers', id))).includes('fs'));

    const info = await fsInfo();
    const containerBytes = Number(info.containerFilesystems[0]!.usedBytes!.value);
    assert.ok(containerBytes >= 8 * MiB && containerBytes < 9 * MiB, `container usage ${containerBytes}`);
    assert.ok(Number(info.imageFilesystems[0]!.usedBytes!.value) < 8 * MiB, 'the writes counted for the images');

    const { stats } = await world.daemon.clients.runtime.containerStats({ containerId: id });
    assert.equal(stats!.writableLayer!.fsId!.mountpoint, layersFs);
    assert.ok(stats!.writableLayer!.usedBytes!.value >= BigInt(8 * MiB));

    await world.daemon.clients.runtime.removeContainer({ containerId: id });
    await assert.rejects(stat(layer), { code: 'ENOENT' });
    assert.equal((await fsInfo()).containerFilesystems[0]!.usedBytes!.value, 0n);
  });

  it('finds a running container and its writable layer after a restart with the same config', async () => {
    const pod = await world.pod();
    const id = await world.run(pod, world.config('sleeper'));
    assert.equal((await world.exec(id, ['sh', '-c', 'echo kept > /state'])).exitCode, 0);
    await world.pods.restart('SIGKILL');

    const r = await world.exec(id, ['cat', '/state']);
    assert.equal(r.stdout, 'kept\n');
    assert.ok((await fsInfo()).containerFilesystems[0]!.usedBytes!.value > 0n);
    await world.daemon.clients.runtime.stopContainer({ containerId: id, timeout: 0n });
    await world.daemon.clients.runtime.removeContainer({ containerId: id });
    await assert.rejects(stat(join(layersFs, id)), { code: 'ENOENT' });
  });

  it('keeps a container on the writable layer it was created with when the setting is dropped', async () => {
    const pod = await world.pod();
    const id = await world.run(pod, world.config('sleeper'));
    assert.equal((await world.exec(id, ['sh', '-c', 'echo split > /where'])).exitCode, 0);
    const toml = world.pods.extraToml;
    world.pods.extraToml = ['[images]', 'min_free_space = 0'];
    try {
      await world.pods.restart('SIGTERM');
      // Unsplit now: new layers go beside their records, but this one stays where its hold says.
      const info = await fsInfo();
      assert.equal(info.containerFilesystems[0]!.fsId!.mountpoint, join(world.daemon.root, 'containers'));
      assert.ok(info.containerFilesystems[0]!.usedBytes!.value > 0n);
      assert.equal((await world.exec(id, ['cat', '/where'])).stdout, 'split\n');
      assert.equal((await stat(join(layersFs, id, 'upper', 'where'))).size, 6);
      const other = await world.run(pod, world.config('sleeper'));
      assert.equal((await world.exec(other, ['sh', '-c', 'echo beside > /where'])).exitCode, 0);
      assert.equal((await stat(join(world.daemon.root, 'containers', other, 'fs', 'upper', 'where'))).size, 7);
      await world.removeContainers();
      await assert.rejects(stat(join(layersFs, id)), { code: 'ENOENT' });
    } finally {
      world.pods.extraToml = toml;
      await world.pods.restart('SIGTERM');
    }
  });
});
