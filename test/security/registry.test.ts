/**
 * A hostile registry cannot exhaust the node: an ImageService on a temp dir pulling from a real
 * registry behind the fault proxy — a manifest and a config that drip one byte at a time just inside
 * the stall timeout, a token server whose reply never ends, a gzip bomb, an image whose layers are
 * too big together, and a filesystem that runs out of room. Each pull fails fast with the right status
 * and a message naming the setting, and leaves nothing on disk.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildLayer, pushBusyboxImage, pushImage } from '../helpers/image-builder.js';
import { imageSuite, openService, type ServiceFixture } from '../helpers/image-service.js';
import { startRegistryProxy, type RegistryProxy } from '../integration/images/registry-proxy.js';
import { isKind } from '../../src/common/errors.js';

const MiB = 1024 * 1024;

/** Nothing of a failed pull on disk: no layers, no temp dirs, no ingest files, no records. */
async function assertNothingStored(fx: ServiceFixture): Promise<void> {
  const images = fx.options.imagesDir;
  assert.deepEqual(await readdir(join(images, 'layers')), []);
  assert.deepEqual(await readdir(join(images, 'ingest')), []);
  assert.deepEqual(await readdir(join(images, 'records')), []);
}

/** Asserts `pull` fails with `kind` and a message matching `re`, within `withinMs`. */
async function failsFast(pull: Promise<unknown>, kind: Parameters<typeof isKind>[1], re: RegExp, withinMs: number): Promise<void> {
  const started = performance.now();
  await assert.rejects(pull, (err: Error) => {
    assert.ok(isKind(err, kind), `expected ${kind}, got ${err.name}: ${err.message}`);
    assert.match(err.message, re);
    return true;
  });
  const took = performance.now() - started;
  assert.ok(took < withinMs, `the pull took ${took.toFixed(0)} ms to fail`);
}

describe('security: a hostile registry cannot exhaust resources', function () {
  this.timeout(60_000);
  let proxy: RegistryProxy | undefined;
  afterEach(async () => {
    await proxy?.stop();
    proxy = undefined;
  });
  const env = imageSuite();

  /** A service whose stall timeout is 1 s (bodies must arrive within 2 s). */
  async function impatient(): Promise<void> {
    await env.fx.cleanup();
    env.fx = await openService({ stallTimeoutSeconds: 1 });
  }

  it('a manifest dripping one byte every 300 ms fails after two stall timeouts', async () => {
    await impatient();
    await pushBusyboxImage(env.registry, 'drip/manifest:1');
    proxy = await startRegistryProxy(env.registry, { drip: { path: /\/manifests\//, intervalMs: 300 } });
    await failsFast(env.fx.images.pull(`${proxy.host}/drip/manifest:1`), 'Unavailable', /manifest "1" did not arrive within 2s/, 10_000);
    await assertNothingStored(env.fx);
  });

  it('an image config dripping one byte every 300 ms fails the same way', async () => {
    await impatient();
    const img = await pushBusyboxImage(env.registry, 'drip/config:1');
    proxy = await startRegistryProxy(env.registry, { drip: { path: new RegExp(`/blobs/${img.configDigest}$`), intervalMs: 300 } });
    await failsFast(env.fx.images.pull(`${proxy.host}/drip/config:1`), 'Unavailable', /blob sha256:[0-9a-f]{64} did not arrive within 2s/, 10_000);
    await assertNothingStored(env.fx);
  });

  it('a token reply that never ends is cut at 1 MiB', async () => {
    await pushBusyboxImage(env.registry, 'bomb/token:1');
    proxy = await startRegistryProxy(env.registry, { token: {}, tokenBomb: true });
    await failsFast(env.fx.images.pull(`${proxy.host}/bomb/token:1`), 'FailedPrecondition', /token reply from .* is larger than 1048576 bytes/, 10_000);
    assert.equal(proxy.tokensIssued, 1);
    await assertNothingStored(env.fx);
  });

  it('a gzip bomb stops at images.max_layer_size: RESOURCE_EXHAUSTED, nothing left', async () => {
    await env.fx.cleanup();
    env.fx = await openService({ maxLayerSize: 8 * MiB });
    const bomb = buildLayer([{ path: 'zeros', content: Buffer.alloc(256 * MiB) }]);
    assert.ok(bomb.blob.length < 2 * MiB, `the bomb is ${bomb.blob.length} bytes compressed`);
    const img = await pushImage(env.registry, 'bomb/gzip:1', { layers: [bomb] });
    await failsFast(env.fx.images.pull(img.reference), 'ResourceExhausted', /layer sha256:[0-9a-f]{64} of ".*": layer is larger than 8388608 bytes uncompressed \(images\.max_layer_size\)/, 10_000);
    await assertNothingStored(env.fx);
  });

  it('layers within the layer cap but too big together fail at images.max_image_size, and are removed', async () => {
    await env.fx.cleanup();
    env.fx = await openService({ maxImageSize: 10 * MiB });
    const layers = [0, 1].map((i) => buildLayer([{ path: `f${i}`, content: Buffer.alloc(6 * MiB, i + 1) }]));
    const img = await pushImage(env.registry, 'big/image:1', { layers });
    await failsFast(env.fx.images.pull(img.reference), 'ResourceExhausted', /takes \d+ bytes unpacked, more than images\.max_image_size \(10485760\)/, 20_000);
    await assertNothingStored(env.fx);
  });

  describe('on a small filesystem', () => {
    let mnt: string;
    beforeEach(async () => {
      mnt = await mkdtemp(join(tmpdir(), 'stove-small-fs-'));
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=48m,mode=0700', 'tmpfs', mnt]);
    });
    afterEach(async () => {
      await env.fx.cleanup();
      execFileSync('umount', ['-l', mnt]);
      await rm(mnt, { recursive: true, force: true });
    });

    it('refuses a layer before unpacking when images.min_free_space would not be left', async () => {
      await env.fx.cleanup();
      env.fx = await openService({ imagesDir: join(mnt, 'images'), minFreeSpace: 64 * MiB });
      const img = await pushBusyboxImage(env.registry, 'space/before:1');
      await failsFast(env.fx.images.pull(img.reference), 'ResourceExhausted', /not enough free space to unpack layer .* images\.min_free_space is 67108864/, 10_000);
      await assertNothingStored(env.fx);
    });

    it('stops a layer that fills the filesystem while it unpacks', async () => {
      await env.fx.cleanup();
      env.fx = await openService({ imagesDir: join(mnt, 'images'), minFreeSpace: 16 * MiB });
      const img = await pushImage(env.registry, 'space/during:1', { layers: [[{ path: 'big', content: Buffer.alloc(40 * MiB, 7) }]] });
      await failsFast(env.fx.images.pull(img.reference), 'ResourceExhausted', /images\.min_free_space \(16777216\)/, 10_000);
      await assertNothingStored(env.fx);
    });
  });
});
