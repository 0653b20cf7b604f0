/** The CRI ImageService of a running `stove serve`, its restart, and the `stove pull`/`stove images` CLI. */
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import { startRegistry, type TestRegistry } from '../../helpers/registry.js';
import { pushBusyboxImage, type PushedImage } from '../../helpers/image-builder.js';
import { startStove, runStoveCli, type StoveProcess } from '../../helpers/stove-process.js';
import {
  ImageStatusRequest,
  ListImagesRequest,
  PullImageRequest,
  RemoveImageRequest,
} from '../../../src/gen/runtime/v1/api.js';

const pullReq = (image: string) => PullImageRequest.fromPartial({ image: { image } });
const statusReq = (image: string, verbose = false) => ImageStatusRequest.fromPartial({ image: { image }, verbose });

describe('images: CRI ImageService over the socket', function () {
  this.timeout(60_000);
  let registry: TestRegistry;
  let stove: StoveProcess;
  let img: PushedImage;
  let named: PushedImage;

  before(async () => {
    registry = await startRegistry();
    img = await pushBusyboxImage(registry, 'cri/busybox:latest', { user: '1000:1000' });
    named = await pushBusyboxImage(registry, 'cri/named:1', { user: 'www-data' });
    stove = await startStove();
  });
  after(async () => {
    await stove?.stop();
    await stove?.cleanup();
    await registry?.stop();
  });

  const rejectsWith = (promise: Promise<unknown>, code: status, message: RegExp) =>
    assert.rejects(promise, (err: { code: number; details: string }) => {
      assert.equal(err.code, code, err.details);
      assert.match(err.details, message);
      return true;
    });

  it('PullImage returns the image ID; ImageStatus reports size, uid, tags, digests', async () => {
    const res = await stove.clients.image.pullImage(pullReq(img.reference));
    assert.equal(res.imageRef, img.configDigest);
    const st = await stove.clients.image.imageStatus(statusReq(img.reference));
    assert.equal(st.image!.id, img.configDigest);
    assert.deepEqual(st.image!.repoTags, [img.reference]);
    assert.deepEqual(st.image!.repoDigests, [img.digestReference]);
    assert.equal(st.image!.uid!.value, 1000n);
    assert.equal(st.image!.username, '');
    assert.ok(st.image!.size > 1_000_000n);
    assert.deepEqual(st.info, {});

    await stove.clients.image.pullImage(pullReq(named.reference));
    const byName = await stove.clients.image.imageStatus(statusReq(named.reference));
    assert.equal(byName.image!.uid, undefined);
    assert.equal(byName.image!.username, 'www-data');
  });

  it('verbose ImageStatus carries the image config as JSON', async () => {
    const st = await stove.clients.image.imageStatus(statusReq(img.configDigest, true));
    const info = JSON.parse(st.info.info!) as { imageSpec: { config: { User: string; Cmd: string[] } } };
    assert.equal(info.imageSpec.config.User, '1000:1000');
    assert.deepEqual(info.imageSpec.config.Cmd, ['sh']);
  });

  it('answers an unknown image with an empty ImageStatus, not an error', async () => {
    const st = await stove.clients.image.imageStatus(statusReq('docker.io/library/not-here:1'));
    assert.equal(st.image, undefined);
  });

  it('ListImages lists everything, or what the filter names', async () => {
    const all = await stove.clients.image.listImages(ListImagesRequest.fromPartial({}));
    assert.deepEqual(all.images.map((i) => i.id).sort(), [img.configDigest, named.configDigest].sort());
    const one = await stove.clients.image.listImages(ListImagesRequest.fromPartial({ filter: { image: { image: named.reference } } }));
    assert.deepEqual(one.images.map((i) => i.id), [named.configDigest]);
    const none = await stove.clients.image.listImages(ListImagesRequest.fromPartial({ filter: { image: { image: 'nothing:here' } } }));
    assert.deepEqual(none.images, []);
  });

  it('validates requests: INVALID_ARGUMENT naming the field or the reason', async () => {
    await rejectsWith(stove.clients.image.pullImage(pullReq('')), status.INVALID_ARGUMENT, /image\.image is required/);
    await rejectsWith(stove.clients.image.pullImage(pullReq('upper/CASE')), status.INVALID_ARGUMENT, /must be lowercase/);
    await rejectsWith(stove.clients.image.pullImage(pullReq('repo@sha256:abc')), status.INVALID_ARGUMENT, /invalid sha256 digest/);
    await rejectsWith(stove.clients.image.removeImage(RemoveImageRequest.fromPartial({})), status.INVALID_ARGUMENT, /image\.image is required/);
  });

  it('ImageFsInfo reports bytes and inodes of the image and container filesystems', async () => {
    const fs = await stove.clients.image.imageFsInfo({});
    const images = fs.imageFilesystems[0]!;
    assert.equal(images.fsId!.mountpoint, `${stove.root}/images`);
    assert.ok(images.usedBytes!.value > 1_000_000n);
    assert.ok(images.inodesUsed!.value > 250n);
    assert.ok(images.timestamp > 0n);
    assert.equal(fs.containerFilesystems[0]!.fsId!.mountpoint, `${stove.root}/containers`);
  });

  it('keeps its images across a restart', async () => {
    await stove.stop();
    stove = await startStove({ dir: stove.dir });
    const st = await stove.clients.image.imageStatus(statusReq(img.reference));
    assert.equal(st.image!.id, img.configDigest);
    const started = performance.now();
    await stove.clients.image.pullImage(pullReq(img.digestReference));
    assert.ok(performance.now() - started < 50);
  });

  it('stove pull prints per-layer progress and stove images lists the images', async () => {
    const pushed = await pushBusyboxImage(registry, 'cli/busybox:2', { extraFiles: [{ path: 'cli', content: 'x'.repeat(2_000_000) }] });
    const args = ['--config', stove.configPath, '--socket', stove.socket, '--state', stove.state];
    const pull = await runStoveCli(['pull', ...args, pushed.reference]);
    assert.equal(pull.code, 0, pull.stderr);
    assert.match(pull.stdout, new RegExp(`^pulled ${pushed.reference.replace(/[.]/g, '\\.')} \\(${pushed.configDigest}\\) in [0-9.]+s$`, 'm'));
    const list = await runStoveCli(['images', ...args]);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /^IMAGE +TAG +IMAGE ID +SIZE$/m);
    assert.match(list.stdout, new RegExp(`^${registry.host}/cli/busybox +2 +${pushed.configDigest.slice(7, 20)} +[0-9.]+MB$`, 'm'));
    const bad = await runStoveCli(['pull', ...args, `${registry.host}/cli/missing:1`]);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /not found/);
  });

  it('RemoveImage by tag removes the image; removing it again is not an error', async () => {
    await stove.clients.image.removeImage(RemoveImageRequest.fromPartial({ image: { image: named.reference } }));
    assert.equal((await stove.clients.image.imageStatus(statusReq(named.configDigest))).image, undefined);
    await stove.clients.image.removeImage(RemoveImageRequest.fromPartial({ image: { image: named.reference } }));
  });
});
