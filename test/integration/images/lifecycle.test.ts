/** Removing images, shared content, images in use by containers, and surviving a restart. */
import assert from 'node:assert/strict';
import { readdir, writeFile, access } from 'node:fs/promises';
import { join } from 'node:path';
import { pushBusyboxImage } from '../../helpers/image-builder.js';
import { imageSuite } from '../../helpers/image-service.js';
import { isKind } from '../../../src/common/errors.js';

describe('images: removal, sharing, holds and restarts', function () {
  this.timeout(60_000);
  const env = imageSuite();

  const layerDirs = () => readdir(join(env.fx.options.imagesDir, 'layers'));
  const blobs = () => readdir(join(env.fx.options.imagesDir, 'blobs/sha256'));

  it('frees a shared layer only when the last image using it is removed', async () => {
    const a = await pushBusyboxImage(env.registry, 'share/a:1', { extraFiles: [{ path: 'a', content: 'a' }] });
    const b = await pushBusyboxImage(env.registry, 'share/b:1', { extraFiles: [{ path: 'b', content: 'b' }] });
    await env.fx.images.pull(a.reference);
    await env.fx.images.pull(b.reference);
    assert.equal((await layerDirs()).length, 3);

    await env.fx.images.remove(a.reference);
    assert.equal(env.fx.images.find(a.reference), undefined);
    assert.equal((await layerDirs()).length, 2);
    const bLayers = env.fx.images.getImage(b.reference).layerDirs;
    for (const dir of bLayers) await access(dir);

    await env.fx.images.remove(b.configDigest);
    assert.deepEqual(await layerDirs(), []);
    assert.deepEqual(await blobs(), []);
    assert.deepEqual(await readdir(join(env.fx.options.imagesDir, 'l')), []);
  });

  it('removing an unknown image is not an error', async () => {
    await env.fx.images.remove('docker.io/library/nothing:here');
    await env.fx.images.remove('sha256:' + 'f'.repeat(64));
  });

  it('refuses to remove an image a container uses, until the container lets go', async () => {
    const img = await pushBusyboxImage(env.registry, 'held/busybox:1');
    await env.fx.images.pull(img.reference);
    const target = join(env.fx.dir, 'rootfs');
    await env.fx.images.mountRootfs(img.reference, 'container-1', target);
    await writeFile(join(target, 'written-by-container'), 'hello');
    const usage = await env.fx.images.rootfsUsage('container-1');
    assert.ok(usage.inodes >= 2n && usage.bytes > 0n, `usage ${usage.bytes}/${usage.inodes}`);

    await assert.rejects(env.fx.images.remove(img.reference), (err: Error) => {
      assert.ok(isKind(err, 'FailedPrecondition'));
      assert.match(err.message, /is in use by container container-1/);
      return true;
    });
    // The hold survives a restart.
    await env.fx.images.unmountRootfs('container-1');
    await env.fx.reopen();
    await assert.rejects(env.fx.images.remove(img.reference), /in use/);
    // Remount keeps what the container wrote.
    await env.fx.images.mountRootfs(img.configDigest, 'container-1', target);
    await access(join(target, 'written-by-container'));
    await env.fx.images.removeRootfs('container-1');
    await env.fx.images.remove(img.reference);
    assert.deepEqual(await layerDirs(), []);
  });

  it('holds the image from before the mount: a failed mount leaves a hold that removal releases', async () => {
    const img = await pushBusyboxImage(env.registry, 'held/failing:1');
    await env.fx.images.pull(img.reference);
    const target = join(env.fx.dir, 'not-a-dir');
    await writeFile(target, 'a file: overlay cannot be mounted here');
    await assert.rejects(env.fx.images.mountRootfs(img.reference, 'container-2', target), /failed to mount the root filesystem of container "container-2"/);
    assert.equal(env.fx.images.heldImage('container-2'), img.configDigest);
    await assert.rejects(env.fx.images.remove(img.reference), /in use by container container-2/);
    await env.fx.images.removeRootfs('container-2');
    assert.equal(env.fx.images.heldImage('container-2'), undefined);
    await env.fx.images.remove(img.reference);
  });

  it('keeps images, tags and layers across a restart and cleans up interrupted work', async () => {
    const img = await pushBusyboxImage(env.registry, 'restart/busybox:1', { user: 'user' });
    await env.fx.images.pull(img.reference);
    // Leftovers of a pull that died: an ingest file and a half-unpacked layer.
    await writeFile(join(env.fx.options.imagesDir, 'ingest', 'partial'), 'x');
    const { mkdir } = await import('node:fs/promises');
    await mkdir(join(env.fx.options.imagesDir, 'layers', '.tmp-dead', 'diff'), { recursive: true });
    const images = await env.fx.reopen();
    const record = images.find(img.reference);
    assert.equal(record?.id, img.configDigest);
    assert.deepEqual(record?.repoDigests, [img.digestReference]);
    assert.equal(images.getImage(img.reference).config.User, 'user');
    assert.deepEqual(await readdir(join(env.fx.options.imagesDir, 'ingest')), []);
    assert.deepEqual(await layerDirs(), [img.layers[0]!.diffId.slice(7)]);
    const started = performance.now();
    await images.pull(img.digestReference);
    assert.ok(performance.now() - started < 20);
  });
});
