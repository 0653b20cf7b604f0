/**
 * A PullImage whose client leaves, against a real `stove serve`: the download stops (the daemon closes
 * its registry connection long before any stall timeout) and nothing of it stays on disk; when another
 * caller waits for the same pull, one caller leaving cancels nothing and the other gets its image from
 * the one download.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { status, type ServiceError } from '@grpc/grpc-js';
import { startRegistry, type TestRegistry } from '../../helpers/registry.js';
import { pushImage, type PushedImage } from '../../helpers/image-builder.js';
import { startStove, type StoveProcess } from '../../helpers/stove-process.js';
import { eventually } from '../../helpers/wait.js';
import { ImageStatusRequest, PullImageRequest, type PullImageResponse } from '../../../src/gen/runtime/v1/api.js';
import { startRegistryProxy, type RegistryProxy } from './registry-proxy.js';

describe('images: a PullImage whose client leaves', function () {
  this.timeout(60_000);
  let registry: TestRegistry;
  let stove: StoveProcess;
  let proxy: RegistryProxy | undefined;

  before(async () => {
    registry = await startRegistry();
    stove = await startStove();
  });
  after(async () => {
    await stove?.stop();
    await stove?.cleanup();
    await registry?.stop();
  });
  afterEach(async () => {
    await proxy?.stop();
    proxy = undefined;
  });

  /** An image with a layer of its own (1 MiB that does not compress), pushed and served through a proxy that stalls it. */
  async function stalledImage(name: string): Promise<{ img: PushedImage; layer: string; reference: string }> {
    const img = await pushImage(registry, name, { layers: [[{ path: 'data', content: randomBytes(1 << 20) }]] });
    const layer = img.layers[0]!.digest;
    proxy = await startRegistryProxy(registry, { stall: { digest: layer, after: 100_000 } });
    return { img, layer, reference: `${proxy.host}/${name}` };
  }

  /** A PullImage the test can cancel; `done` settles with the call's error or response. */
  function pull(reference: string) {
    let cancel!: () => void;
    const done = new Promise<ServiceError | PullImageResponse>((resolve) => {
      const call = stove.clients.rawImage.pullImage(PullImageRequest.fromPartial({ image: { image: reference } }), (err, res) => resolve(err ?? res));
      cancel = () => call.cancel();
    });
    return { done, cancel };
  }

  async function pullLeftovers(): Promise<string[]> {
    const images = join(stove.root, 'images');
    const temp = (await readdir(join(images, 'layers'))).filter((n) => n.startsWith('.tmp-')).map((n) => `layers/${n}`);
    return [...temp, ...(await readdir(join(images, 'ingest'))).map((n) => `ingest/${n}`)];
  }

  const cancelLogged = () =>
    stove
      .output()
      .split('\n')
      .some((l) => l.includes('rpc failed') && l.includes('"rpc":"PullImage"') && l.includes('"code":"CANCELLED"'));

  it('stops the download when its only caller leaves, and leaves no temp files', async () => {
    const { img, layer, reference } = await stalledImage('cancel/alone:1');
    const { done, cancel } = pull(reference);
    await eventually('the layer download is under way', () => proxy!.blobGets(layer) === 1 && proxy!.openBlobGets() === 1, 20_000);
    assert.ok((await pullLeftovers()).length > 0, 'the download has a temp dir or ingest file while it runs');
    cancel();
    assert.equal(((await done) as ServiceError).code, status.CANCELLED);
    // The stall timeout is 60 s: only the cancel closes the connection this soon.
    await eventually('the daemon closed its registry connection', () => proxy!.openBlobGets() === 0, 10_000);
    await eventually('the failure path removed the temp dir and ingest file', async () => (await pullLeftovers()).length === 0, 10_000);
    await eventually('the daemon logged the cancelled call', cancelLogged);
    const st = await stove.clients.image.imageStatus(ImageStatusRequest.fromPartial({ image: { image: img.configDigest } }));
    assert.equal(st.image, undefined, 'no image record');
  });

  it('keeps the download of a pull another caller still waits for, which then succeeds', async () => {
    const { img, layer, reference } = await stalledImage('cancel/shared:1');
    const leaving = pull(reference);
    const staying = pull(reference);
    await eventually('the layer download is under way', () => proxy!.blobGets(layer) === 1 && proxy!.openBlobGets() === 1, 20_000);
    const logged = stove.output().length;
    leaving.cancel();
    assert.equal(((await leaving.done) as ServiceError).code, status.CANCELLED);
    await eventually('the daemon saw the caller leave', () => stove.output().slice(logged).includes('"code":"CANCELLED"'));
    assert.equal(proxy!.openBlobGets(), 1, 'the shared download goes on');
    proxy!.releaseStalls();
    const res = await staying.done;
    assert.equal((res as PullImageResponse).imageRef, img.configDigest, `the other caller: ${(res as ServiceError).details}`);
    assert.equal(proxy!.blobGets(layer), 1, 'one download served both');
    assert.deepEqual(await pullLeftovers(), []);
  });
});
