/**
 * What can go wrong in a pull: corrupt or hostile content, authentication, broken and stalled
 * connections, duplicate work, unsupported manifests, mirrors. Each failure must be clear and leave
 * nothing behind.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startRegistry, type TestRegistry } from '../../helpers/registry.js';
import { pushBusyboxImage, pushImage, busyboxLayer, type LayerEntry } from '../../helpers/image-builder.js';
import { imageSuite, openService, type ServiceFixture } from '../../helpers/image-service.js';
import { startRegistryProxy, type RegistryProxy } from './registry-proxy.js';
import { isKind } from '../../../src/common/errors.js';

/** Nothing of a failed pull on disk: no layers, no temp dirs, no ingest files, no records. */
async function assertNothingStored(fx: ServiceFixture, keepLayers = 0): Promise<void> {
  const images = fx.options.imagesDir;
  const layers = await readdir(join(images, 'layers'));
  assert.equal(layers.filter((n) => n.startsWith('.')).length, 0, `temp layer dirs left: ${layers}`);
  assert.equal(layers.length, keepLayers, `layers: ${layers}`);
  assert.deepEqual(await readdir(join(images, 'ingest')), []);
  if (keepLayers === 0) assert.deepEqual(await readdir(join(images, 'records')), []);
}

describe('images: faults and hostile content', function () {
  this.timeout(60_000);
  let authRegistry: TestRegistry;
  let proxy: RegistryProxy | undefined;
  let outside: string;

  before(async () => {
    authRegistry = await startRegistry({ auth: { username: 'alice', password: 'wonderland' } });
    outside = await mkdtemp(join(tmpdir(), 'stove-outside-'));
  });
  after(async () => {
    await authRegistry?.stop();
    await rm(outside, { recursive: true, force: true });
  });
  // Before the service's cleanup (registered next): a proxy stops first.
  afterEach(async () => {
    await proxy?.stop();
    proxy = undefined;
  });
  const env = imageSuite();

  it('refuses a blob whose bytes do not match its digest and stores nothing', async () => {
    const img = await pushImage(env.registry, 'tamper/layer:1', { layers: [[{ path: 'f', content: 'x'.repeat(100_000) }]] });
    await env.registry.tamperBlob(img.layers[0]!.digest);
    await assert.rejects(env.fx.images.pull(img.reference), (err: Error) => {
      assert.match(err.message, /layer digest mismatch: expected sha256:[a-f0-9]{64}, got sha256:/);
      assert.ok(isKind(err, 'Internal'));
      return true;
    });
    await assertNothingStored(env.fx);
  });

  it('refuses a config whose bytes do not match its digest', async () => {
    const img = await pushBusyboxImage(env.registry, 'tamper/config:1', { env: ['PAD=' + 'p'.repeat(200)] });
    await env.registry.tamperBlob(img.configDigest, 10);
    await assert.rejects(env.fx.images.pull(img.reference), /image config digest mismatch/);
    await assertNothingStored(env.fx);
  });

  const hostile: [string, (dir: string) => LayerEntry[], RegExp][] = [
    ['a ../ entry', () => [{ path: '../escape', content: 'x' }], /entry "\.\.\/escape" points outside the layer/],
    ['a deep ../ entry', () => [{ type: 'dir', path: 'a' }, { path: 'a/../../escape', content: 'x' }], /points outside the layer/],
    [
      'a write through a symlink',
      (dir) => [
        { type: 'symlink', path: 'link', target: dir },
        { path: 'link/pwned', content: 'x' },
      ],
      /entry "link\/pwned" would be written through the symlink "link"/,
    ],
    [
      'a hardlink out of the layer',
      () => [{ type: 'hardlink', path: 'h', target: '../../../../etc/hostname' }],
      /hardlink .* points outside the layer|points outside the layer/,
    ],
    [
      'a hardlink through a symlink',
      (dir) => [
        { type: 'symlink', path: 'l', target: dir },
        { type: 'hardlink', path: 'h', target: 'l/secret' },
      ],
      /goes through "l", which is not a directory of this layer/,
    ],
  ];
  for (const [what, entries, message] of hostile) {
    it(`rejects a layer with ${what}, leaving nothing on disk`, async () => {
      const img = await pushImage(env.registry, `evil/layer:${what.replace(/[^a-z]/g, '')}`, { layers: [entries(outside)] });
      await assert.rejects(env.fx.images.pull(img.reference), (err: Error) => {
        assert.match(err.message, /was rejected as unsafe/);
        assert.match(err.message, message);
        return true;
      });
      await assertNothingStored(env.fx);
      assert.deepEqual(await readdir(outside), []);
    });
  }

  it('never follows a symlink planted by an earlier layer', async () => {
    const img = await pushImage(env.registry, 'evil/cross:1', {
      layers: [[{ type: 'symlink', path: 'link', target: outside }], [{ path: 'link/pwned', content: 'x' }]],
    });
    await env.fx.images.pull(img.reference);
    assert.deepEqual(await readdir(outside), []);
  });

  it('fails clearly without credentials or with wrong ones, and pulls with the right ones', async () => {
    const img = await pushBusyboxImage(authRegistry, 'private/busybox:1');
    await assert.rejects(env.fx.images.pull(img.reference), (err: Error) => {
      assert.match(err.message, /pull access denied for 127\.0\.0\.1:\d+\/private\/busybox: .* requires authentication .* no credentials were given/);
      assert.ok(isKind(err, 'FailedPrecondition'));
      return true;
    });
    await assert.rejects(env.fx.images.pull(img.reference, { username: 'alice', password: 'wrong' }), /rejected the credentials \(user "alice"\)/);
    assert.equal((await env.fx.images.pull(img.reference, { username: 'alice', password: 'wonderland' })).id, img.configDigest);
    await env.fx.images.remove(img.reference);
    const auth = Buffer.from('alice:wonderland').toString('base64');
    assert.equal((await env.fx.images.pull(img.reference, { auth })).id, img.configDigest);
  });

  it('uses credentials from the config file for a registry', async () => {
    await env.fx.cleanup();
    const creds = { mirrors: [], insecure: false, username: 'alice', password: 'wonderland', auth: '', identityToken: '' };
    env.fx = await openService({ registries: { [authRegistry.host]: creds } });
    const img = await pushBusyboxImage(authRegistry, 'private/config:1');
    assert.equal((await env.fx.images.pull(img.reference)).id, img.configDigest);
  });

  it('gets a bearer token from the realm, caches it per scope, and reports refused credentials', async () => {
    const img = await pushBusyboxImage(env.registry, 'token/busybox:1', { cmd: ['id'] });
    proxy = await startRegistryProxy(env.registry, { token: { username: 'bob', password: 'builder' } });
    const ref = `${proxy.host}/token/busybox:1`;
    await assert.rejects(env.fx.images.pull(ref), /token server .* rejected the credentials \(anonymous\)/);
    await assert.rejects(env.fx.images.pull(ref, { username: 'bob', password: 'nope' }), /rejected the credentials \(user "bob"\): HTTP 401/);
    assert.equal((await env.fx.images.pull(ref, { username: 'bob', password: 'builder' })).id, img.configDigest);
    assert.equal(proxy.tokensIssued, 1);
    await env.fx.images.remove(ref);
    await env.fx.images.pull(ref, { username: 'bob', password: 'builder' });
    assert.equal(proxy.tokensIssued, 1, 'the cached token was used again');
  });

  it('resumes a blob download cut mid-way with a Range request', async () => {
    const img = await pushBusyboxImage(env.registry, 'resume/busybox:1');
    const digest = img.layers[0]!.digest;
    proxy = await startRegistryProxy(env.registry, { cut: { digest, cutAfter: 300_000, times: 2 } });
    const record = await env.fx.images.pull(`${proxy.host}/resume/busybox:1`);
    assert.equal(record.id, img.configDigest);
    assert.equal(proxy.blobGets(digest), 3);
    assert.ok(proxy.ranges.some((r) => /^bytes=\d+-$/.test(r) && Number(r.slice(6, -1)) >= 300_000), `ranges: ${proxy.ranges}`);
  });

  it('re-reads and skips what it has when the registry ignores Range', async () => {
    const img = await pushBusyboxImage(env.registry, 'resume/norange:1');
    const digest = img.layers[0]!.digest;
    proxy = await startRegistryProxy(env.registry, { cut: { digest, cutAfter: 500_000, times: 1 }, ignoreRange: true });
    assert.equal((await env.fx.images.pull(`${proxy.host}/resume/norange:1`)).id, img.configDigest);
    assert.equal(proxy.blobGets(digest), 2);
  });

  it('fails a stalled transfer after the stall timeout, with a clear error', async () => {
    await env.fx.cleanup();
    env.fx = await openService({ stallTimeoutSeconds: 1 });
    const img = await pushBusyboxImage(env.registry, 'stall/busybox:1');
    proxy = await startRegistryProxy(env.registry, { stall: { digest: img.layers[0]!.digest, after: 100_000 } });
    const started = Date.now();
    await assert.rejects(env.fx.images.pull(`${proxy.host}/stall/busybox:1`), /stalled: no data for 1s at byte 100000 of \d+/);
    assert.ok(Date.now() - started < 10_000);
    await assertNothingStored(env.fx);
  });

  it('downloads each blob once for concurrent pulls of one image and of images sharing a layer', async () => {
    const a = await pushBusyboxImage(env.registry, 'shared/a:1', { cmd: ['a'] });
    await pushBusyboxImage(env.registry, 'shared/b:1', { cmd: ['b'] });
    proxy = await startRegistryProxy(env.registry);
    const host = proxy.host;
    const results = await Promise.all([
      env.fx.images.pull(`${host}/shared/a:1`),
      env.fx.images.pull(`${host}/shared/a:1`),
      env.fx.images.pull(`${host}/shared/b:1`),
      env.fx.images.pull(`${host}/shared/b:1`),
    ]);
    assert.equal(results[0]!.id, results[1]!.id);
    assert.equal(proxy.blobGets(a.layers[0]!.digest), 1);
    assert.equal((await readdir(join(env.fx.options.imagesDir, 'layers'))).length, 1);
  });

  it('refuses Docker schema 1 manifests with a clear message', async () => {
    proxy = await startRegistryProxy(env.registry, {
      canned: {
        '/v2/old/schema1/manifests/latest': {
          status: 200,
          headers: { 'content-type': 'application/vnd.docker.distribution.manifest.v1+prettyjws' },
          body: JSON.stringify({ schemaVersion: 1, name: 'old/schema1', tag: 'latest', fsLayers: [], history: [] }),
        },
      },
    });
    await assert.rejects(env.fx.images.pull(`${proxy.host}/old/schema1:latest`), /manifest schema 1, which is deprecated and not supported/);
  });

  it('tries mirrors in order before the registry itself', async () => {
    await env.fx.cleanup();
    const mirrors = ['http://127.0.0.1:1', env.registry.url];
    env.fx = await openService({ registries: { 'registry.test.invalid': { mirrors, insecure: false, username: '', password: '', auth: '', identityToken: '' } } });
    const img = await pushBusyboxImage(env.registry, 'mirrored/busybox:1');
    const record = await env.fx.images.pull('registry.test.invalid/mirrored/busybox:1');
    assert.equal(record.id, img.configDigest);
    assert.deepEqual(record.repoTags, ['registry.test.invalid/mirrored/busybox:1']);
  });

  it('reports a missing image as not found', async () => {
    await assert.rejects(env.fx.images.pull(`${env.registry.host}/no/such:image`), (err: Error) => {
      assert.match(err.message, /manifest "image" of 127\.0\.0\.1:\d+\/no\/such not found/);
      assert.ok(isKind(err, 'NotFound'));
      return true;
    });
  });

  it('checks each layer against the config diff_ids', async () => {
    const good = busyboxLayer('gzip');
    const img = await pushImage(env.registry, 'diffid/wrong:1', { layers: [{ ...good, diffId: 'sha256:' + '0'.repeat(64) }] });
    await assert.rejects(env.fx.images.pull(img.reference), /does not match the image config's diff_id sha256:0{64}/);
    await assertNothingStored(env.fx);
  });
});
