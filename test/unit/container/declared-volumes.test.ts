import assert from 'node:assert/strict';
import { lstat, mkdir, mkdtemp, readFile, readlink, rm, symlink, writeFile, chmod } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Mount } from '../../../src/gen/runtime/v1/api.js';
import { copyDeclaredVolumes, declaredVolumes, hostOwner, makeDeclaredVolumeDirs, MAX_DECLARED_VOLUMES } from '../../../src/container/declared-volumes.js';
import { isKind } from '../../../src/common/errors.js';
import { copyTree, CopyLimitError } from '../../../src/storage/copy-tree.js';

const vols = (...paths: string[]) => Object.fromEntries(paths.map((p) => [p, {}]));
const refused = (fn: () => unknown, re: RegExp) =>
  assert.throws(fn, (err: unknown) => isKind(err, 'FailedPrecondition') && re.test((err as Error).message));
const refusedAsync = (p: Promise<unknown>, re: RegExp) =>
  assert.rejects(p, (err: unknown) => isKind(err, 'FailedPrecondition') && re.test((err as Error).message));

describe('declared VOLUMEs', () => {
  describe('declaredVolumes', () => {
    it('normalises, sorts, dedupes, and leaves out what a CRI mount or a pod file covers', () => {
      const mounts = [Mount.fromPartial({ containerPath: '/cache/', hostPath: '/x' })];
      assert.deepEqual(declaredVolumes(vols('/var/lib/db/', '/data', '//data', '/cache', '/etc/hosts', '/data/sub'), mounts, 'image "x"'), ['/data', '/data/sub', '/var/lib/db']);
      assert.deepEqual(declaredVolumes(undefined, [], 'image "x"'), []);
    });

    it('refuses hostile paths naming the image and the path', () => {
      const what = 'image "evil"';
      refused(() => declaredVolumes(vols('relative'), [], what), /image "evil" declares VOLUME "relative", which is not an absolute path/);
      refused(() => declaredVolumes(vols('/a/../etc'), [], what), /contains "\.\."/);
      refused(() => declaredVolumes(vols('/'), [], what), /root filesystem itself/);
      refused(() => declaredVolumes(vols('/./'), [], what), /root filesystem itself/);
      for (const p of ['/proc', '/proc/sys', '/sys/kernel', '/dev/shm', '/dev']) refused(() => declaredVolumes(vols(p), [], what), /kernel filesystem/);
      refused(() => declaredVolumes(vols('/a\0b'), [], what), /not a valid path/);
      refused(() => declaredVolumes(vols(`/${'a'.repeat(5000)}`), [], what), /not a valid path/);
      const many = vols(...Array.from({ length: MAX_DECLARED_VOLUMES + 1 }, (_, i) => `/v${i}`));
      refused(() => declaredVolumes(many, [], what), new RegExp(`declares ${MAX_DECLARED_VOLUMES + 1} VOLUMEs`));
      assert.equal(declaredVolumes(vols(...Array.from({ length: MAX_DECLARED_VOLUMES }, (_, i) => `/v${i}`)), [], what).length, MAX_DECLARED_VOLUMES);
    });
  });

  describe('copy and mkdir on a tree', () => {
    let dir: string;
    let rootfs: string;
    const me = { uid: process.getuid!(), gid: process.getgid!() };
    beforeEach(async () => {
      dir = await mkdtemp(join(tmpdir(), 'stove-declvol-'));
      rootfs = join(dir, 'rootfs');
      await mkdir(join(rootfs, 'data/sub'), { recursive: true });
      await writeFile(join(rootfs, 'data/seed'), 'seed\n', { mode: 0o640 });
      await writeFile(join(rootfs, 'data/sub/tool'), '#!/bin/sh\n', { mode: 0o755 });
      await chmod(join(rootfs, 'data'), 0o750);
      await symlink('/etc/passwd', join(rootfs, 'data/abs'));
      await symlink('../../../../../../etc', join(rootfs, 'data/up'));
      await mkdir(join(rootfs, 'srv/db'), { recursive: true });
      await writeFile(join(rootfs, 'srv/db/x'), 'x\n');
      await mkdir(join(rootfs, 'var/lib'), { recursive: true });
      await symlink('/srv/db', join(rootfs, 'var/lib/db'));
      await symlink('../..', join(rootfs, 'out'));
      await writeFile(join(rootfs, 'afile'), 'f\n');
    });
    afterEach(() => rm(dir, { recursive: true, force: true }));

    it('copies the image content at each path (symlinks as symlinks, followed only inside the root) and makes empty ones', async () => {
      const volumes = join(dir, 'volumes');
      const mounts = await copyDeclaredVolumes(rootfs, ['/data', '/missing/deep', '/var/lib/db'], volumes, me, 'image "x"');
      assert.deepEqual(mounts.map((m) => [m.containerPath, m.hostPath, m.readonly]), [
        ['/data', join(volumes, '0'), false],
        ['/missing/deep', join(volumes, '1'), false],
        ['/var/lib/db', join(volumes, '2'), false],
      ]);
      assert.equal(await readFile(join(volumes, '0/seed'), 'utf8'), 'seed\n');
      assert.equal((await lstat(join(volumes, '0'))).mode & 0o7777, 0o750);
      assert.equal((await lstat(join(volumes, '0/seed'))).mode & 0o7777, 0o640);
      assert.equal((await lstat(join(volumes, '0/sub/tool'))).mode & 0o7777, 0o755);
      assert.equal(await readlink(join(volumes, '0/abs')), '/etc/passwd');
      assert.equal(await readlink(join(volumes, '0/up')), '../../../../../../etc');
      assert.equal((await lstat(join(volumes, '1'))).isDirectory(), true);
      assert.equal(await readFile(join(volumes, '2/x'), 'utf8'), 'x\n');
      // Nothing made in the root filesystem.
      await assert.rejects(lstat(join(rootfs, 'missing')), { code: 'ENOENT' });
    });

    it('refuses a file and a symlink out of the root', async () => {
      await refusedAsync(copyDeclaredVolumes(rootfs, ['/afile'], join(dir, 'v1'), me, 'image "x"'), /VOLUME "\/afile" is not a directory in the image/);
      await refusedAsync(copyDeclaredVolumes(rootfs, ['/out/etc'], join(dir, 'v2'), me, 'image "x"'), /VOLUME "\/out\/etc" leads outside its root/);
    });

    it('copyTree stops at its entry and depth limits', async () => {
      for (let i = 0; i < 20; i++) await writeFile(join(rootfs, 'data', `f${i}`), '');
      await assert.rejects(copyTree(join(rootfs, 'data'), join(dir, 'c1'), { maxEntries: 10, maxDepth: 10 }), CopyLimitError);
      await assert.rejects(copyTree(join(rootfs, 'data'), join(dir, 'c2'), { maxEntries: 1000, maxDepth: 0 }), /deeper than 0 levels/);
      const ok = await copyTree(join(rootfs, 'data'), join(dir, 'c3'), { maxEntries: 1000, maxDepth: 1 });
      assert.equal(ok.entries, 1 + 20 + 5); // data, f0..f19, seed, sub, sub/tool, abs, up
      assert.equal(ok.skipped, 0);
    });

    it('mkdir: makes what is missing in the root filesystem, leaves what exists, refuses a file', async () => {
      await makeDeclaredVolumeDirs(rootfs, ['/data', '/new/deeper', '/var/lib/db'], me, 'image "x"');
      assert.equal((await lstat(join(rootfs, 'new/deeper'))).isDirectory(), true);
      assert.equal((await lstat(join(rootfs, 'var/lib/db'))).isSymbolicLink(), true);
      await refusedAsync(makeDeclaredVolumeDirs(rootfs, ['/afile'], me, 'image "x"'), /is not a directory in the image/);
      await refusedAsync(makeDeclaredVolumeDirs(rootfs, ['/out/x'], me, 'image "x"'), /leads outside its root/);
    });

    it('maps owners through a user namespace', () => {
      const shift = { uids: [{ containerId: 0, hostId: 100000, size: 65536 }], gids: [{ containerId: 0, hostId: 200000, size: 65536 }] };
      assert.deepEqual(hostOwner(1000, 1000, shift), { uid: 101000, gid: 201000 });
      assert.deepEqual(hostOwner(1000, 1000, undefined), { uid: 1000, gid: 1000 });
    });
  });
});
