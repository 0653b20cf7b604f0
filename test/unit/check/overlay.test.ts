/**
 * `stove check`'s overlayfs line: a module the kernel loads on the first overlay mount is a warning on a
 * healthy node, a kernel without overlayfs a failure.
 */
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { checkOverlay } from '../../../src/check/doctor.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

describe('stove check: overlayfs', () => {
  const dir = tempDirPerTest('stove-overlay-check-');
  const sources = () => ({ filesystems: join(dir(), 'filesystems'), modulesDir: join(dir(), 'modules') });
  const FILESYSTEMS_WITHOUT = 'nodev\tsysfs\nnodev\ttmpfs\n\text4\nnodev\tproc\n';

  async function modules(files: Record<string, string>): Promise<void> {
    for (const [path, text] of Object.entries(files)) {
      await mkdir(join(sources().modulesDir, path, '..'), { recursive: true });
      await writeFile(join(sources().modulesDir, path), text);
    }
  }

  it('is ok when the kernel has overlay registered', async () => {
    await writeFile(sources().filesystems, `${FILESYSTEMS_WITHOUT}nodev\toverlay\n`);
    const r = await checkOverlay(sources());
    assert.equal(r.status, 'ok');
  });

  it('warns, and does not fail, when overlay is a module not loaded yet', async () => {
    await writeFile(sources().filesystems, FILESYSTEMS_WITHOUT);
    await modules({
      'modules.dep': 'kernel/fs/fuse/fuse.ko.xz:\nkernel/fs/overlayfs/overlay.ko.xz:\nkernel/fs/isofs/isofs.ko.xz:\n',
      'modules.builtin': 'kernel/fs/ext4/ext4.ko\n',
      'kernel/fs/overlayfs/overlay.ko.xz': 'module',
    });
    const r = await checkOverlay(sources());
    assert.equal(r.status, 'warn');
    assert.match(r.detail, /overlay module not loaded yet: .*overlay\.ko\.xz/);
    assert.match(r.fix ?? '', /modprobe overlay/);
  });

  it('is ok when overlay is built in', async () => {
    await writeFile(sources().filesystems, FILESYSTEMS_WITHOUT);
    await modules({ 'modules.builtin': 'kernel/fs/ext4/ext4.ko\nkernel/fs/overlayfs/overlay.ko\n', 'modules.dep': '' });
    assert.equal((await checkOverlay(sources())).status, 'ok');
  });

  it('fails when modules.dep names an overlay module that is not on disk', async () => {
    await writeFile(sources().filesystems, FILESYSTEMS_WITHOUT);
    await modules({ 'modules.dep': 'kernel/fs/overlayfs/overlay.ko:\n' });
    assert.equal((await checkOverlay(sources())).status, 'fail');
  });

  it('fails on a kernel without overlayfs, naming where it looked', async () => {
    await writeFile(sources().filesystems, FILESYSTEMS_WITHOUT);
    await modules({ 'modules.dep': 'kernel/fs/fuse/fuse.ko:\n', 'modules.builtin': 'kernel/fs/ext4/ext4.ko\n' });
    const r = await checkOverlay(sources());
    assert.equal(r.status, 'fail');
    assert.match(r.detail, /overlay not in .*filesystems and no overlay module in .*modules/);
  });

  it('fails without a module directory at all (a kernel without /lib/modules)', async () => {
    await writeFile(sources().filesystems, FILESYSTEMS_WITHOUT);
    assert.equal((await checkOverlay(sources())).status, 'fail');
  });
});
