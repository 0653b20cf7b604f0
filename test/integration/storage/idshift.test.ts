/**
 * Shifting a container root filesystem's owners into a user namespace's range, on a real overlay
 * mounted `metacopy=on` (root needed): owners move, special bits and file capabilities survive,
 * symlinks are not followed, the image layer is untouched and no file data is copied up.
 */
import assert from 'node:assert/strict';
import { chmod, chown, link, lstat, mkdir, mkdtemp, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { shiftOwnership } from '../../../src/storage/idshift.js';
import { diskUsage, mountOverlay, unmountOverlay } from '../../../src/storage/rootfs.js';

const require = createRequire(import.meta.url);
const xattr = require('@napi-rs/xattr') as {
  getAttribute(path: string, name: string): Promise<Buffer | null>;
  setAttribute(path: string, name: string, value: Buffer): Promise<void>;
};

const BASE = 600000;
const shift = { uids: [{ containerId: 0, hostId: BASE, size: 65536 }], gids: [{ containerId: 0, hostId: BASE, size: 65536 }] };

describe('root filesystem id shift on an overlay (real mounts)', function () {
  let work = '';
  let rootfs = '';
  let lower = '';

  before(async function () {
    if (process.getuid?.() !== 0) {
      console.log('    skipped: chown and overlay mounts need root');
      this.skip();
    }
    work = await mkdtemp(join(tmpdir(), 'stove-idshift-'));
    lower = join(work, 'lower');
    rootfs = join(work, 'rootfs');
    await mkdir(join(lower, 'bin'), { recursive: true });
    await mkdir(join(lower, 'home/user'), { recursive: true });
    await writeFile(join(lower, 'bin/tool'), Buffer.alloc(4 << 20, 7));
    await chmod(join(lower, 'bin/tool'), 0o4755);
    await link(join(lower, 'bin/tool'), join(lower, 'bin/alias'));
    await writeFile(join(lower, 'bin/pinger'), 'x');
    const caps = Buffer.alloc(20);
    caps.writeUInt32LE(0x02000001, 0);
    caps.writeUInt32LE(1 << 13, 4); // CAP_NET_RAW
    await xattr.setAttribute(join(lower, 'bin/pinger'), 'security.capability', caps);
    await chown(join(lower, 'home/user'), 1000, 1000);
    await writeFile(join(lower, 'home/far'), 'x');
    await chown(join(lower, 'home/far'), 70000, 5);
    await symlink('/etc/passwd', join(lower, 'passwd-link'));
    await mountOverlay({ baseDir: work, lowerDirs: ['lower'], upperDir: join(work, 'upper'), workDir: join(work, 'work'), target: rootfs, metacopy: true });
  });

  after(async () => {
    if (!work) return;
    await unmountOverlay(rootfs).catch(() => {});
    await rm(work, { recursive: true, force: true });
  });

  it('moves every owner into the range, keeping set-user-ID and capabilities, without copying data', async () => {
    const passwdBefore = await stat('/etc/passwd');
    const result = await shiftOwnership(rootfs, shift);
    assert.equal(result.unmapped, 1, 'home/far has a uid outside the range');
    const owner = async (p: string) => {
      const st = await lstat(join(rootfs, p));
      return [st.uid, st.gid];
    };
    assert.deepEqual(await owner('.'), [BASE, BASE]);
    assert.deepEqual(await owner('bin'), [BASE, BASE]);
    assert.deepEqual(await owner('home/user'), [BASE + 1000, BASE + 1000]);
    assert.deepEqual(await owner('home/far'), [70000, BASE + 5], 'the gid is shifted, the unmapped uid stays');
    assert.deepEqual(await owner('passwd-link'), [BASE, BASE], 'the link itself');
    const passwdAfter = await stat('/etc/passwd');
    assert.deepEqual([passwdAfter.uid, passwdAfter.gid], [passwdBefore.uid, passwdBefore.gid], 'the link target is not followed');
    for (const p of ['bin/tool', 'bin/alias']) {
      const st = await stat(join(rootfs, p));
      assert.equal(st.mode & 0o7777, 0o4755, `${p} keeps set-user-ID`);
      assert.equal(st.uid, BASE);
    }
    const caps = (await xattr.getAttribute(join(rootfs, 'bin/pinger'), 'security.capability'))!;
    assert.equal(caps.length, 24, 'v3 capabilities');
    assert.equal(caps.readUInt32LE(4), 1 << 13);
    assert.equal(caps.readUInt32LE(20), BASE, 'owned by the namespace root');
    // The image layer is untouched and metacopy kept the 4 MiB of data out of the upper dir.
    const layer = await stat(join(lower, 'bin/tool'));
    assert.deepEqual([layer.uid, layer.mode & 0o7777], [0, 0o4755]);
    const upper = await diskUsage(join(work, 'upper'));
    assert.ok(upper.bytes < 1n << 20n, `upper dir holds ${upper.bytes} bytes`);
    // A second pass finds nothing left to do.
    assert.deepEqual(await shiftOwnership(rootfs, { uids: [{ containerId: BASE, hostId: BASE, size: 65536 }], gids: [{ containerId: BASE, hostId: BASE, size: 65536 }] }), {
      shifted: 0,
      unmapped: 1,
    });
  });
});
