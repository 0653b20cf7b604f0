/** Pulling real images from a loopback docker-registry and unpacking them, checked on disk and through overlay. */
import assert from 'node:assert/strict';
import { lstat, readFile, readlink, readdir, stat, access } from 'node:fs/promises';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { connect } from 'node:net';
import {
  pushBusyboxImage,
  pushImage,
  pushIndex,
  buildLayer,
  busyboxLayer,
  hostPlatform,
  type LayerEntry,
  type PushedImage,
} from '../../helpers/image-builder.js';
import { imageSuite } from '../../helpers/image-service.js';
import { startRegistry } from '../../helpers/registry.js';
import { isMountPoint } from '../../../src/platform/mount.js';

const xattr = createRequire(import.meta.url)('@napi-rs/xattr') as { getAttributeSync(p: string, n: string): Buffer | null };

describe('images: pulling and unpacking', function () {
  this.timeout(60_000);
  const env = imageSuite();

  it('pulls by tag and by digest, records tags and digests', async () => {
    const img = await pushBusyboxImage(env.registry, 'pull/tag:v1', { user: '1000', env: ['A=b'], workdir: '/tmp', stopSignal: 'SIGINT' });
    const record = await env.fx.images.pull(img.reference);
    assert.equal(record.id, img.configDigest);
    assert.deepEqual(record.repoTags, [img.reference]);
    assert.deepEqual(record.repoDigests, [img.digestReference]);
    assert.equal(record.size, img.config.length + img.layers[0]!.blob.length);

    const info = env.fx.images.getImage(img.reference);
    assert.equal(info.config.User, '1000');
    assert.equal(info.config.WorkingDir, '/tmp');
    assert.equal(info.config.StopSignal, 'SIGINT');
    assert.deepEqual(info.config.Cmd, ['sh']);
    assert.equal(info.layerDirs.length, 1);
    assert.equal(await readlink(join(info.layerDirs[0]!, 'bin/sh')), 'busybox');

    for (const spec of [img.configDigest, img.configDigest.slice(7), img.configDigest.slice(7, 19), img.digestReference])
      assert.equal(env.fx.images.find(spec)?.id, img.configDigest, spec);

    assert.equal((await env.fx.images.pull(img.digestReference)).id, img.configDigest);
    const again = await env.fx.images.pull(img.reference);
    assert.equal(again.id, img.configDigest);
  });

  it('answers a pull by digest of a present image from the store, without the registry', async () => {
    // A registry of this test's own, stopped after the first pull: any request after that is refused.
    const registry = await startRegistry();
    let img: PushedImage;
    try {
      img = await pushBusyboxImage(registry, 'pull/offline:v1');
      await env.fx.images.pull(img.reference);
    } finally {
      await registry.stop();
    }
    await assert.rejects(
      new Promise<void>((resolve, reject) => {
        const socket = connect(registry.port, '127.0.0.1');
        socket.on('connect', () => {
          socket.destroy();
          resolve();
        });
        socket.on('error', reject);
      }),
      { code: 'ECONNREFUSED' },
      'the registry is gone',
    );
    assert.equal((await env.fx.images.pull(img.digestReference)).id, img.configDigest);
  });

  it('pulls by digest only, verifying the manifest digest', async () => {
    const img = await pushBusyboxImage(env.registry, 'pull/digest:v1', { untagged: true, cmd: ['true'] });
    const record = await env.fx.images.pull(img.digestReference);
    assert.equal(record.id, img.configDigest);
    assert.deepEqual(record.repoTags, []);
    await assert.rejects(env.fx.images.pull(`${img.repository}:nosuchtag`), /not found/);
  });

  it('pulls OCI and Docker media-type images', async () => {
    const oci = await pushBusyboxImage(env.registry, 'media/oci:1', { mediaTypes: 'oci' });
    const docker = await pushBusyboxImage(env.registry, 'media/docker:1', { mediaTypes: 'docker', cmd: ['echo', 'docker'] });
    assert.equal((await env.fx.images.pull(oci.reference)).id, oci.configDigest);
    assert.equal((await env.fx.images.pull(docker.reference)).id, docker.configDigest);
    // Same base layer in both: unpacked once, shared.
    assert.deepEqual(env.fx.images.getImage(oci.reference).layerDirs, env.fx.images.getImage(docker.reference).layerDirs);
  });

  for (const media of ['oci', 'docker'] as const) {
    it(`picks the host platform from a multi-arch ${media === 'oci' ? 'OCI index' : 'Docker manifest list'}`, async () => {
      const host = hostPlatform();
      const other = { architecture: host.architecture === 'arm64' ? 'amd64' : 'arm64', os: 'linux', variant: host.architecture === 'arm64' ? undefined : 'v8' };
      const native = await pushBusyboxImage(env.registry, `multi/${media}`, { untagged: true, mediaTypes: media, platform: host });
      const foreign = await pushImage(env.registry, `multi/${media}`, { untagged: true, mediaTypes: media, platform: other, layers: [[{ path: 'foreign', content: 'x' }]] });
      const index = await pushIndex(env.registry, `multi/${media}:latest`, [foreign, native], media);
      const record = await env.fx.images.pull(index.reference);
      assert.equal(record.id, native.configDigest);
      assert.equal(record.manifestDigest, native.manifestDigest);
      assert.deepEqual(record.repoDigests, [index.digestReference]);

      const only = await pushIndex(env.registry, `multi/${media}:foreign-only`, [foreign], media);
      await assert.rejects(env.fx.images.pull(only.reference), (err: Error) => {
        assert.match(err.message, new RegExp(`no match for platform linux/${host.architecture}`));
        assert.match(err.message, new RegExp(`it has linux/${other.architecture}`));
        return true;
      });
    });
  }

  it('refuses a single-platform image built for another architecture', async () => {
    const host = hostPlatform();
    const img = await pushImage(env.registry, 'foreign/single:1', {
      platform: { os: 'linux', architecture: host.architecture === 's390x' ? 'amd64' : 's390x' },
      layers: [[{ path: 'a', content: 'b' }]],
    });
    await assert.rejects(env.fx.images.pull(img.reference), /is for platform linux\/(s390x|amd64), not linux\//);
  });

  it('unpacks gzip, zstd and uncompressed layers (and sniffs a mislabelled one)', async () => {
    const layers = [
      buildLayer([{ path: 'gz', content: 'gzip layer' }], 'gzip'),
      buildLayer([{ path: 'zst', content: 'zstd layer' }], 'zstd'),
      buildLayer([{ path: 'raw', content: 'plain layer' }], 'none'),
      // gzip bytes labelled as a plain tar
      { ...buildLayer([{ path: 'mislabelled', content: 'sniffed' }], 'gzip'), compression: 'none' as const },
    ];
    const img = await pushImage(env.registry, 'compress/all:1', { layers: [busyboxLayer('zstd'), ...layers] });
    await env.fx.images.pull(img.reference);
    const dirs = env.fx.images.getImage(img.reference).layerDirs;
    assert.equal(await readFile(join(dirs[1]!, 'gz'), 'utf8'), 'gzip layer');
    assert.equal(await readFile(join(dirs[2]!, 'zst'), 'utf8'), 'zstd layer');
    assert.equal(await readFile(join(dirs[3]!, 'raw'), 'utf8'), 'plain layer');
    assert.equal(await readFile(join(dirs[4]!, 'mislabelled'), 'utf8'), 'sniffed');
    assert.ok((await stat(join(dirs[0]!, 'bin/busybox'))).size > 100_000);
  });

  it('writes every entry type with its metadata: hardlinks, symlinks, devices, fifos, modes, owners, times, xattrs, long names', async () => {
    const longName = 'deep/' + 'n'.repeat(120) + '/file';
    const gnuName = 'gnu/' + 'g'.repeat(150);
    const cap = Buffer.from('0100000200200000000000000000000000000000', 'hex'); // cap_net_bind_service+ep
    const entries: LayerEntry[] = [
      { type: 'dir', path: 'd', mode: 0o2775, uid: 1000, gid: 1000, mtime: 1_600_000_000 },
      { path: 'd/file', content: 'content', mode: 0o4755, uid: 1000, gid: 100, mtime: 1_500_000_000.25, xattrs: { 'user.note': 'hello', 'security.capability': cap } },
      // As archivers write a hard link: with its file's own metadata.
      { type: 'hardlink', path: 'd/hard', target: 'd/file', mode: 0o4755, uid: 1000, gid: 100, mtime: 1_500_000_000.25, xattrs: { 'user.note': 'hello', 'security.capability': cap } },
      { type: 'symlink', path: 'd/abs-link', target: '/etc/passwd', uid: 1000, gid: 1000 },
      { type: 'symlink', path: 'd/rel-link', target: '../../../etc/shadow' },
      { type: 'char', path: 'd/null', major: 1, minor: 3, mode: 0o666 },
      { type: 'block', path: 'd/loop', major: 7, minor: 0, mode: 0o660 },
      { type: 'fifo', path: 'd/pipe', mode: 0o644 },
      { type: 'dir', path: 'sticky', mode: 0o1777 },
      { path: longName, content: 'pax long name' },
      { path: 'bigid', content: 'x', uid: 3_000_000_000, gid: 3_000_000_001 },
    ];
    const gnu = buildLayer([{ path: gnuName, content: 'gnu long name' }], 'gzip', { longNames: 'gnu' });
    const img = await pushImage(env.registry, 'entries/all:1', { layers: [entries, gnu] });
    await env.fx.images.pull(img.reference);
    const [dir, gnuDir] = env.fx.images.getImage(img.reference).layerDirs as [string, string];

    const file = await lstat(join(dir, 'd/file'));
    assert.equal(file.mode & 0o7777, 0o4755);
    assert.equal(file.uid, 1000);
    assert.equal(file.gid, 100);
    assert.equal(file.mtimeMs, 1_500_000_000_250);
    assert.equal(file.nlink, 2);
    assert.equal((await lstat(join(dir, 'd/hard'))).ino, file.ino);
    assert.deepEqual(xattr.getAttributeSync(join(dir, 'd/file'), 'security.capability'), cap);
    assert.equal(xattr.getAttributeSync(join(dir, 'd/file'), 'user.note')?.toString(), 'hello');
    const d = await lstat(join(dir, 'd'));
    assert.equal(d.mode & 0o7777, 0o2775);
    assert.equal(d.mtimeMs, 1_600_000_000_000);
    assert.equal(await readlink(join(dir, 'd/abs-link')), '/etc/passwd');
    assert.equal((await lstat(join(dir, 'd/abs-link'))).uid, 1000);
    assert.equal(await readlink(join(dir, 'd/rel-link')), '../../../etc/shadow');
    const nul = await lstat(join(dir, 'd/null'));
    assert.ok(nul.isCharacterDevice());
    assert.equal(nul.rdev, (1 << 8) | 3);
    assert.ok((await lstat(join(dir, 'd/loop'))).isBlockDevice());
    assert.ok((await lstat(join(dir, 'd/pipe'))).isFIFO());
    assert.equal((await lstat(join(dir, 'sticky'))).mode & 0o7777, 0o1777);
    assert.equal(await readFile(join(dir, longName), 'utf8'), 'pax long name');
    const big = await lstat(join(dir, 'bigid'));
    assert.equal(big.uid, 3_000_000_000);
    assert.equal(big.gid, 3_000_000_001);
    assert.equal(await readFile(join(gnuDir, gnuName), 'utf8'), 'gnu long name');
  });

  it("applies a hard link's header to the inode it shares, as containerd and CRI-O do: owner, mode, times", async () => {
    const entries: LayerEntry[] = [
      { type: 'dir', path: 'bin', mode: 0o755 },
      { path: 'bin/tool', content: '#!/bin/sh\n', mode: 0o4755, uid: 1000, gid: 1000, mtime: 1_500_000_000 },
      // A header that disagrees with its file: the last one written wins, for every name of the inode.
      { type: 'hardlink', path: 'bin/alias', target: 'bin/tool', mode: 0o640, uid: 7, gid: 8, mtime: 1_600_000_000 },
      { type: 'symlink', path: 'bin/link', target: 'tool' },
      // A hard link to a symlink changes the symlink's own owner, never its target's mode.
      { type: 'hardlink', path: 'bin/link2', target: 'bin/link', mode: 0o600, uid: 9, gid: 9 },
    ];
    const img = await pushImage(env.registry, 'entries/hardlink-header:1', { layers: [entries] });
    await env.fx.images.pull(img.reference);
    const [dir] = env.fx.images.getImage(img.reference).layerDirs as [string];
    const tool = await lstat(join(dir, 'bin/tool'));
    assert.equal(tool.ino, (await lstat(join(dir, 'bin/alias'))).ino);
    assert.equal(tool.mode & 0o7777, 0o640);
    assert.deepEqual([tool.uid, tool.gid], [7, 8]);
    assert.equal(tool.mtimeMs, 1_600_000_000_000);
    const link = await lstat(join(dir, 'bin/link'));
    assert.ok(link.isSymbolicLink());
    assert.deepEqual([link.uid, link.gid], [9, 9]);
  });

  it('turns whiteouts and opaque dirs into overlayfs ones: the mounted root shows the merged view', async () => {
    const base: LayerEntry[] = [
      { type: 'dir', path: 'keep' },
      { path: 'keep/a', content: 'a' },
      { path: 'keep/gone', content: 'deleted above' },
      { type: 'dir', path: 'opaque' },
      { path: 'opaque/old', content: 'hidden above' },
      { type: 'dir', path: 'gonedir' },
      { path: 'gonedir/x', content: 'x' },
    ];
    const top: LayerEntry[] = [
      { type: 'whiteout', path: 'keep/gone' },
      { type: 'whiteout', path: 'gonedir' },
      { type: 'dir', path: 'opaque' },
      { type: 'opaque', path: 'opaque' },
      { path: 'opaque/new', content: 'new' },
      { path: 'keep/b', content: 'b' },
    ];
    const img = await pushBusyboxImage(env.registry, 'overlay/whiteouts:1', { extraLayers: [base, top] });
    await env.fx.images.pull(img.reference);
    const dirs = env.fx.images.getImage(img.reference).layerDirs;
    const topDir = dirs[2]!;
    const wh = await lstat(join(topDir, 'keep/gone'));
    assert.ok(wh.isCharacterDevice() && wh.rdev === 0, 'whiteout is a 0:0 char device');
    assert.equal(xattr.getAttributeSync(join(topDir, 'opaque'), 'trusted.overlay.opaque')?.toString(), 'y');
    assert.deepEqual((await readdir(topDir)).sort(), ['gonedir', 'keep', 'opaque']);

    const target = join(env.fx.dir, 'merged');
    await env.fx.images.mountRootfs(img.reference, 'c1', target);
    try {
      assert.ok(await isMountPoint(target));
      assert.deepEqual((await readdir(join(target, 'keep'))).sort(), ['a', 'b']);
      assert.deepEqual(await readdir(join(target, 'opaque')), ['new']);
      await assert.rejects(access(join(target, 'gonedir')));
      assert.ok((await stat(join(target, 'bin/busybox'))).isFile());
    } finally {
      await env.fx.images.removeRootfs('c1');
    }
    assert.equal(await isMountPoint(target), false);
    await assert.rejects(access(join(env.fx.dir, 'containers/c1/fs')));
  });

  it('picks up a moved tag; the old image stays reachable by digest', async () => {
    const v1 = await pushBusyboxImage(env.registry, 'moving/tag:latest', { cmd: ['echo', 'one'] });
    assert.equal((await env.fx.images.pull(v1.reference)).id, v1.configDigest);
    const v2 = await pushBusyboxImage(env.registry, 'moving/tag:latest', { cmd: ['echo', 'two'] });
    assert.equal((await env.fx.images.pull(v2.reference)).id, v2.configDigest);
    assert.equal(env.fx.images.find(v1.reference)?.id, v2.configDigest);
    const old = env.fx.images.find(v1.digestReference);
    assert.equal(old?.id, v1.configDigest);
    assert.deepEqual(old?.repoTags, []);
  });

  it('mounts an image of 130 layers (overlay options stay within one page)', async function () {
    this.timeout(120_000);
    const layers = Array.from({ length: 129 }, (_v, i) => [{ path: `layer-${i}`, content: String(i) }] as LayerEntry[]);
    const img = await pushBusyboxImage(env.registry, 'many/layers:1', { extraLayers: layers });
    await env.fx.images.pull(img.reference);
    const target = join(env.fx.dir, 'many');
    await env.fx.images.mountRootfs(img.reference, 'c-many', target);
    try {
      assert.equal(await readFile(join(target, 'layer-0'), 'utf8'), '0');
      assert.equal(await readFile(join(target, 'layer-128'), 'utf8'), '128');
    } finally {
      await env.fx.images.removeRootfs('c-many');
    }
  });
});
