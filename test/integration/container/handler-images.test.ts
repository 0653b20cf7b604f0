/**
 * Image pulls per runtime class (KEP-4216, RuntimeClassInImageCriApi): `runtime_handler` in the ImageSpec
 * of the image calls. Handlers `crun` and `isolated` (runc again) have image stores of their own, handler
 * `runc2` (runc) uses the shared one. Real pulls from the world's loopback registry, real pods. The pods of
 * a store of their own run under `isolated`: crun 1.8 refuses this host's hybrid cgroup layout ("cgroups
 * in hybrid mode not supported"), so its pods cannot start here.
 */
import assert from 'node:assert/strict';
import { access, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ImageStatusRequest, ListImagesRequest, PullImageRequest, RemoveImageRequest } from '../../../src/gen/runtime/v1/api.js';
import { pushBusyboxImage, type PushedImage } from '../../helpers/image-builder.js';
import { ContainerWorld, rejectsWith, skipReason } from './world.js';
import { suiteHooks } from '../../helpers/suite.js';

const exists = (path: string) => access(path).then(() => true, () => false);

describe('images: a runtime handler with an image store of its own (runtime.handlers.<name>.image_store)', function () {
  this.timeout(120_000);
  const world = new ContainerWorld();
  let dir = '';
  let only: PushedImage;
  let both: PushedImage;

  const image = () => world.daemon.clients.image;
  const pull = (ref: string, runtimeHandler: string) => image().pullImage(PullImageRequest.fromPartial({ image: { image: ref, runtimeHandler } }));
  const status = (ref: string, runtimeHandler: string) => image().imageStatus(ImageStatusRequest.fromPartial({ image: { image: ref, runtimeHandler } }));
  const remove = (ref: string, runtimeHandler: string) => image().removeImage(RemoveImageRequest.fromPartial({ image: { image: ref, runtimeHandler } }));
  /** Every listed entry of `id` as the handler it is listed under. */
  const listedUnder = async (id: string) =>
    (await image().listImages(ListImagesRequest.fromPartial({}))).images.filter((i) => i.id === id).map((i) => i.spec!.runtimeHandler).sort();
  const crunStore = () => join(world.daemon.root, 'images-crun');
  const isolatedStore = () => join(world.daemon.root, 'images-isolated');

  suiteHooks({
    what: 'runtime handler image store tests',
    skipReason,
    setup: async () => {
      dir = await mkdtemp(join(tmpdir(), 'stove-handler-images-'));
      world.pods.dir = dir;
      world.pods.extraToml.push(
        '[runtime.handlers.crun]',
        'path = "/usr/bin/crun"',
        `root = "${join(dir, 'crun')}"`,
        `image_store = "${join(dir, 'root', 'images-crun')}"`,
        '[runtime.handlers.isolated]',
        'path = "/usr/sbin/runc"',
        `root = "${join(dir, 'isolated')}"`,
        `image_store = "${join(dir, 'root', 'images-isolated')}"`,
        '[runtime.handlers.runc2]',
        'path = "/usr/sbin/runc"',
        `root = "${join(dir, 'runc2')}"`,
      );
      await world.start();
      only = await pushBusyboxImage(world.registry, 'handler/only-one:1', { cmd: ['sleep', '3600'], env: ['ONLY=1'] });
      both = await pushBusyboxImage(world.registry, 'handler/both:1', { cmd: ['sleep', '3600'], env: ['BOTH=1'] });
    },
    tidy: async () => {
      await world.removeAll().catch(() => {});
      for (const handler of ['', 'crun', 'isolated']) for (const ref of [only.reference, both.reference]) await remove(ref, handler).catch(() => {});
    },
    leftovers: async () => {
      const left = await world.leftovers();
      for (const handler of ['', 'crun', 'isolated']) {
        for (const ref of [only.reference, both.reference]) if ((await status(ref, handler)).image) left.push(`image ${ref} for "${handler}"`);
      }
      return left;
    },
    cleanup: async () => {
      await world.cleanup();
      if (dir) await rm(dir, { recursive: true, force: true });
    },
  });

  it("pulls into the handler's own store: listed and status'd for it alone", async () => {
    const { imageRef } = await pull(only.reference, 'crun');
    assert.equal(imageRef, only.configDigest);
    assert.deepEqual(await listedUnder(only.configDigest), ['crun']);
    const st = await status(only.reference, 'crun');
    assert.equal(st.image!.id, only.configDigest);
    assert.equal(st.image!.spec!.runtimeHandler, 'crun');
    assert.deepEqual(st.image!.repoTags, [only.reference]);
    // Not in the shared store, nor for a handler that uses it.
    assert.equal((await status(only.reference, '')).image, undefined);
    assert.equal((await status(only.reference, 'runc2')).image, undefined);
    assert.equal((await status(only.reference, 'runc')).image, undefined);
    const filtered = await image().listImages(ListImagesRequest.fromPartial({ filter: { image: { image: only.reference, runtimeHandler: 'crun' } } }));
    assert.deepEqual(filtered.images.map((i) => i.id), [only.configDigest]);
    const unfilteredShared = await image().listImages(ListImagesRequest.fromPartial({ filter: { image: { image: only.reference } } }));
    assert.deepEqual(unfilteredShared.images, []);
    // On disk under the handler's store only.
    assert.ok(await exists(join(crunStore(), 'records', `${only.configDigest.slice(7)}.json`)));
    assert.ok(!(await exists(join(world.daemon.root, 'images', 'records', `${only.configDigest.slice(7)}.json`))));
    // The shared store's images are listed under '' as before.
    assert.deepEqual(await listedUnder(world.image('busybox').configDigest), ['']);
  });

  it('keeps one copy per store; removal is per store', async () => {
    await pull(both.reference, '');
    await pull(both.reference, 'crun');
    assert.deepEqual(await listedUnder(both.configDigest), ['', 'crun']);
    // A handler without a store of its own sees the shared copy, listed under ''.
    assert.equal((await status(both.reference, 'runc2')).image!.spec!.runtimeHandler, '');

    await remove(both.reference, 'crun');
    assert.deepEqual(await listedUnder(both.configDigest), ['']);
    assert.equal((await status(both.reference, 'crun')).image, undefined);
    assert.equal((await status(both.reference, '')).image!.id, both.configDigest);
    // Its layers left the handler's store; the shared copy still runs.
    assert.ok(!(await exists(join(crunStore(), 'blobs', 'sha256', both.configDigest.slice(7)))));
    await pull(both.reference, 'crun');
    await remove(both.configDigest, '');
    assert.deepEqual(await listedUnder(both.configDigest), ['crun']);
  });

  it('answers a handler that is not configured with INVALID_ARGUMENT naming the configured ones', async () => {
    const message = /runtime handler "kata" is not configured \(runtime handlers: "runc", "crun", "isolated", "runc2"\)/;
    await rejectsWith(pull(only.reference, 'kata'), 'INVALID_ARGUMENT', message);
    await rejectsWith(status(only.reference, 'kata'), 'INVALID_ARGUMENT', message);
    await rejectsWith(remove(only.reference, 'kata'), 'INVALID_ARGUMENT', message);
    await rejectsWith(image().listImages(ListImagesRequest.fromPartial({ filter: { image: { image: '', runtimeHandler: 'kata' } } })), 'INVALID_ARGUMENT', message);
  });

  it("runs a pod's containers from its handler's store", async () => {
    const isolatedPod = world.pods.pod();
    const isolated = { id: await world.pods.run(isolatedPod, 'isolated'), config: isolatedPod };
    const config = world.config('busybox', { image: { image: only.reference } });
    // Present only in the shared store and crun's: not found for this pod.
    await pull(only.reference, '');
    await pull(only.reference, 'crun');
    await rejectsWith(world.create(isolated, config), 'NOT_FOUND', /image ".*only-one:1" not found for runtime handler "isolated": pull it for runtime handler "isolated"/);
    await remove(only.reference, '');
    await remove(only.reference, 'crun');

    await pull(only.reference, 'isolated');
    const id = await world.run(isolated, config);
    assert.equal((await world.exec(id, ['sh', '-c', 'echo ok $ONLY'])).stdout, 'ok 1\n');
    // The kubelet's image GC matches containers to images by ID and this handler.
    const listed = (await world.daemon.clients.runtime.listContainers({ filter: { id, state: undefined, podSandboxId: '', labelSelector: {} } })).containers[0]!;
    assert.equal(listed.image!.runtimeHandler, 'isolated');
    assert.equal(listed.imageId, only.configDigest);
    assert.equal((await world.status(id)).status!.image!.runtimeHandler, 'isolated');
    assert.ok(await exists(join(isolatedStore(), 'holds', `${id}.json`)));
    assert.ok(!(await exists(join(world.daemon.root, 'images', 'holds', `${id}.json`))));
    await rejectsWith(remove(only.reference, 'isolated'), 'FAILED_PRECONDITION', /is in use by container/);

    // A handler on the shared store runs from it, as before.
    const sharedPod = world.pods.pod();
    const shared = { id: await world.pods.run(sharedPod, 'runc2'), config: sharedPod };
    const other = await world.run(shared, world.config('sleeper'));
    assert.equal((await world.daemon.clients.runtime.listContainers({ filter: { id: other, state: undefined, podSandboxId: '', labelSelector: {} } })).containers[0]!.image!.runtimeHandler, '');
    assert.ok(await exists(join(world.daemon.root, 'images', 'holds', `${other}.json`)));

    // After a restart the container is still found in its handler's store, and removal frees the image.
    await world.pods.restart('SIGKILL');
    assert.equal((await world.exec(id, ['sh', '-c', 'echo again'])).stdout, 'again\n');
    await rejectsWith(remove(only.reference, 'isolated'), 'FAILED_PRECONDITION', /is in use by container/);
    await world.daemon.clients.runtime.removeContainer({ containerId: id });
    assert.ok(!(await exists(join(isolatedStore(), 'holds', `${id}.json`))));
    await remove(only.reference, 'isolated');
    assert.equal((await status(only.reference, 'isolated')).image, undefined);
  });

  it('reports each image store in ImageFsInfo, the shared one first', async () => {
    await pull(only.reference, 'crun');
    const info = await image().imageFsInfo({});
    assert.deepEqual(info.imageFilesystems.map((f) => f.fsId!.mountpoint), [join(world.daemon.root, 'images'), crunStore(), isolatedStore()]);
    assert.ok(info.imageFilesystems[1]!.usedBytes!.value > 1_000_000n);
    assert.equal(info.containerFilesystems.length, 1);
  });
});
