/**
 * Unpacking a layer touches nothing outside the layer: images pulled from a real registry into an
 * ImageService on a temp dir, with layers that try to reach a host directory — directory times applied
 * through a parent replaced by a symlink (`a/`, `a/b/`, then `a -> /host/dir`), whiteouts naming `.` or
 * `..`, and overlayfs' private xattrs (which overlay trusts for metacopy and redirects).
 */
import assert from 'node:assert/strict';
import { lstat, mkdir, mkdtemp, readdir, readlink, rm, utimes, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pushImage, type LayerEntry } from '../helpers/image-builder.js';
import { imageSuite } from '../helpers/image-service.js';
import { acceptedXattr } from '../../src/storage/extract.js';

const require = createRequire(import.meta.url);
const xattr = require('@napi-rs/xattr') as {
  listAttributesSync(path: string): string[];
  getAttributeSync(path: string, name: string): Buffer | null;
};

/** The times a host directory had before the pull: far in the past, so any change shows. */
const HOST_TIME = 1_000_000_000;

describe('security: unpacking stays inside the layer', function () {
  this.timeout(60_000);
  let host: string;
  const env = imageSuite();

  beforeEach(async () => {
    host = await mkdtemp(join(tmpdir(), 'stove-host-'));
    await mkdir(join(host, 'b'));
    await writeFile(join(host, 'b/keep'), 'host file');
    await utimes(join(host, 'b'), HOST_TIME, HOST_TIME);
    await utimes(host, HOST_TIME, HOST_TIME);
  });
  afterEach(async () => {
    await rm(host, { recursive: true, force: true });
  });

  it('never applies a directory time through a parent that a later entry replaced with a symlink', async () => {
    const entries: LayerEntry[] = [
      { type: 'dir', path: 'a', mtime: 1_600_000_000 },
      { type: 'dir', path: 'a/b', mtime: 1_650_000_000 },
      { type: 'symlink', path: 'a', target: host },
    ];
    const img = await pushImage(env.registry, 'evil/times:1', { layers: [entries] });
    await env.fx.images.pull(img.reference);
    const [dir] = env.fx.images.getImage(img.reference).layerDirs as [string];
    assert.equal(await readlink(join(dir, 'a')), host);
    const b = await lstat(join(host, 'b'));
    assert.equal(b.mtimeMs, HOST_TIME * 1000, 'the host directory\'s mtime changed');
    assert.equal(b.atimeMs, HOST_TIME * 1000, 'the host directory\'s atime changed');
    assert.equal((await lstat(host)).mtimeMs, HOST_TIME * 1000);
  });

  for (const name of ['.wh...', '.wh..', 'sub/.wh...', '.wh.']) {
    it(`refuses the whiteout "${name}" and removes nothing above the layer`, async () => {
      const before = await pushImage(env.registry, 'plain/before:1', { layers: [[{ path: 'f', content: 'kept' }]] });
      await env.fx.images.pull(before.reference);
      const entries: LayerEntry[] = [{ type: 'dir', path: 'sub' }, { path: name, content: '' }];
      const img = await pushImage(env.registry, `evil/whiteout:${name.replace(/[^a-z]/g, '') || 'top'}${name.length}`, { layers: [entries] });
      await assert.rejects(env.fx.images.pull(img.reference), (err: Error) => {
        assert.match(err.message, /was rejected as unsafe: invalid whiteout/);
        return true;
      });
      // The other image and every layer dir are still there; no temp dir is left.
      const layers = await readdir(join(env.fx.options.imagesDir, 'layers'));
      assert.deepEqual(layers.filter((n) => n.startsWith('.tmp')), []);
      const [kept] = env.fx.images.getImage(before.reference).layerDirs as [string];
      assert.equal((await lstat(join(kept, 'f'))).size, 4);
    });
  }

  it('drops overlayfs-private and host-policy xattrs, keeps user attributes and file capabilities', async () => {
    const cap = Buffer.from('0100000200200000000000000000000000000000', 'hex'); // cap_net_bind_service+ep
    const entries: LayerEntry[] = [
      { type: 'dir', path: 'redir', xattrs: { 'trusted.overlay.redirect': '/etc', 'trusted.overlay.opaque': 'y' } },
      {
        path: 'meta',
        content: '',
        xattrs: {
          'trusted.overlay.metacopy': '',
          'trusted.overlay.origin': 'x',
          'user.overlay.redirect': '/etc',
          'trusted.other': 'x',
          'security.selinux': 'system_u:object_r:shadow_t:s0',
          'user.note': 'kept',
          'security.capability': cap,
        },
      },
    ];
    const img = await pushImage(env.registry, 'evil/xattrs:1', { layers: [entries] });
    await env.fx.images.pull(img.reference);
    const [dir] = env.fx.images.getImage(img.reference).layerDirs as [string];
    assert.deepEqual(xattr.listAttributesSync(join(dir, 'redir')).filter((n) => !n.startsWith('system.')), []);
    assert.deepEqual(xattr.listAttributesSync(join(dir, 'meta')).filter((n) => !n.startsWith('system.')).sort(), ['security.capability', 'user.note']);
    assert.deepEqual(xattr.getAttributeSync(join(dir, 'meta'), 'security.capability'), cap);

    for (const name of ['trusted.overlay.opaque', 'trusted.anything', 'user.overlay.metacopy', 'security.ima', 'security.selinux'])
      assert.equal(acceptedXattr(name), false, name);
    for (const name of ['user.mime_type', 'security.capability', 'system.posix_acl_access']) assert.equal(acceptedXattr(name), true, name);
  });
});
