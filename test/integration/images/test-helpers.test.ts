/** The test registry and image builder themselves: what every other image test relies on. */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, readlink, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { request } from 'undici';
import { startRegistry, type TestRegistry } from '../../helpers/registry.js';
import { buildLayer, buildTar, pushBusyboxImage, sha256, MEDIA } from '../../helpers/image-builder.js';

describe('test helpers: registry and image builder', function () {
  this.timeout(60_000);
  let registry: TestRegistry;
  let authRegistry: TestRegistry;
  let dir: string;

  before(async () => {
    registry = await startRegistry();
    authRegistry = await startRegistry({ auth: { username: 'alice', password: 's3cret' } });
    dir = await mkdtemp(join(tmpdir(), 'stove-helpers-'));
  });
  after(async () => {
    await registry?.stop();
    await authRegistry?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('pushes a busybox image whose manifest, config and layer the registry serves back', async () => {
    const img = await pushBusyboxImage(registry, 'test/busybox:latest', { env: ['A=1'], user: '1000' });
    assert.equal(img.reference, `${registry.host}/test/busybox:latest`);
    const res = await request(`${registry.url}/v2/test/busybox/manifests/latest`, { headers: { accept: MEDIA.ociManifest } });
    const body = Buffer.from(await res.body.arrayBuffer());
    assert.equal(res.statusCode, 200);
    assert.equal(sha256(body), img.manifestDigest);
    const manifest = JSON.parse(body.toString()) as { config: { digest: string }; layers: { digest: string }[] };
    assert.equal(manifest.config.digest, img.configDigest);
    const config = JSON.parse(img.config.toString()) as { config: { Cmd: string[]; Env: string[]; User: string } };
    assert.deepEqual(config.config.Cmd, ['sh']);
    assert.equal(config.config.User, '1000');
    assert.ok(config.config.Env.includes('A=1'));

    const blob = await request(`${registry.url}/v2/test/busybox/blobs/${manifest.layers[0]!.digest}`);
    const tar = gunzipSync(Buffer.from(await blob.body.arrayBuffer()));
    await writeFile(join(dir, 'layer.tar'), tar);
    execFileSync('tar', ['-xpf', join(dir, 'layer.tar'), '-C', dir]);
    assert.equal(await readlink(join(dir, 'bin/sh')), 'busybox');
    assert.equal((await stat(join(dir, 'tmp'))).mode & 0o7777, 0o1777);
    const out = execFileSync('chroot', [dir, '/bin/sh', '-c', 'echo hi from $(id -u user)'], { encoding: 'utf8' });
    assert.equal(out.trim(), 'hi from 1000');
  });

  it('writes tars GNU tar reads: PAX long names, GNU long names, devices, xattrs', async () => {
    const long = 'd/' + 'x'.repeat(150);
    for (const longNames of ['pax', 'gnu'] as const) {
      const tar = buildTar(
        [
          { type: 'dir', path: 'd' },
          { path: long, content: 'long' },
          { type: 'symlink', path: 'd/l', target: 'y'.repeat(120) },
          { type: 'char', path: 'd/null', major: 1, minor: 3 },
          { type: 'fifo', path: 'd/p' },
          { path: 'd/cap', content: 'c', xattrs: { 'user.bin': Buffer.from([0xff, 0x00, 0x80]) } },
        ],
        { longNames },
      );
      await writeFile(join(dir, `t-${longNames}.tar`), tar);
      const listing = execFileSync('tar', ['-tvf', join(dir, `t-${longNames}.tar`)], { encoding: 'utf8' });
      assert.match(listing, new RegExp(long));
      assert.match(listing, /^c.* 1,3 .*d\/null$/m);
      assert.match(listing, /^p.*d\/p$/m);
      assert.match(listing, new RegExp(`d/l -> ${'y'.repeat(120)}`));
    }
    const layer = buildLayer([{ path: 'a', content: 'b' }], 'none');
    assert.equal(layer.digest, layer.diffId);
  });

  it('pushes to a registry with basic auth, which refuses anonymous pulls', async () => {
    const img = await pushBusyboxImage(authRegistry, 'private/busybox:1');
    const anon = await request(`${authRegistry.url}/v2/private/busybox/manifests/1`);
    await anon.body.dump();
    assert.equal(anon.statusCode, 401);
    assert.match(String(anon.headers['www-authenticate']), /^Basic realm="stove-test"/);
    const ok = await request(`${authRegistry.url}/v2/private/busybox/manifests/${img.manifestDigest}`, {
      headers: { authorization: authRegistry.authorization()!, accept: MEDIA.ociManifest },
    });
    await ok.body.dump();
    assert.equal(ok.statusCode, 200);
  });
});
