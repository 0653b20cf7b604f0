import assert from 'node:assert/strict';
import { mkdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { installPauseRootfs } from '../../../src/sandbox/pause-rootfs.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

describe('pause root filesystem install', () => {
  const dir = tempDirPerTest('stove-pause-rootfs-');

  it('copies the pause program into the state dir, readable and traversable by any uid', async () => {
    const source = join(dir(), 'src');
    await mkdir(join(source, 'bin'), { recursive: true });
    await writeFile(join(source, 'bin/pause'), 'binary', { mode: 0o700 });
    const state = join(dir(), 'state');
    await mkdir(state);
    const root = await installPauseRootfs(state, source);
    assert.equal(root, join(state, 'pause-rootfs'));
    assert.equal((await stat(join(root, 'bin/pause'))).mode & 0o777, 0o755);
    assert.equal((await stat(root)).mode & 0o777, 0o755);
    for (const d of ['dev', 'proc', 'sys', 'etc']) assert.ok((await stat(join(root, d))).isDirectory());
    // A second start replaces the copy.
    await writeFile(join(source, 'bin/pause'), 'newer');
    await installPauseRootfs(state, source);
    assert.equal((await stat(join(root, 'bin/pause'))).size, 5);
  });

  it('names the missing program and the command that builds it', async () => {
    await assert.rejects(installPauseRootfs(dir(), join(dir(), 'nowhere')), /pause program .*bin\/pause is missing: run "make build"/);
  });
});
