/**
 * `stove serve` from an install whose helper programs (`make build`'s dist/libexec) are missing stops
 * at start-up and names each of them, instead of starting and falling back to something slower or
 * failing at the first pod.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cp, mkdir, mkdtemp, readlink, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT } from '../helpers/stove-process.js';

describe('stove serve without its helper programs', function () {
  this.timeout(120_000);
  let dir: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stove-install-'));
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('refuses to start and names every missing helper', async () => {
    // A copy of the install: the launcher, package.json (which marks the install dir), the daemon's
    // bundle as real files, node_modules shared; no dist/libexec.
    await mkdir(join(dir, 'bin'));
    await mkdir(join(dir, 'dist'));
    await cp(join(REPO_ROOT, 'bin/stove'), join(dir, 'bin/stove'));
    await cp(join(REPO_ROOT, 'package.json'), join(dir, 'package.json'));
    await symlink(join(REPO_ROOT, 'node_modules'), join(dir, 'node_modules'));
    const bundle = resolve(join(REPO_ROOT, 'dist'), await readlink(join(REPO_ROOT, 'dist/bundle')));
    await cp(bundle, join(dir, 'dist/bundle-copy'), { recursive: true });
    await symlink('bundle-copy', join(dir, 'dist/bundle'));
    const result = await promisify(execFile)(
      join(dir, 'bin/stove'),
      ['serve', '--socket', join(dir, 'stove.sock'), '--root', join(dir, 'root'), '--state', join(dir, 'state')],
      { timeout: 60_000 },
    ).then(
      () => assert.fail('stove serve started without its helpers'),
      (err: { code?: number; stderr: string; stdout: string }) => err,
    );
    assert.notEqual(result.code, 0);
    const output = result.stderr + result.stdout;
    for (const helper of ['stove-spawn-helper', 'stove-mount-helper', 'stove-attach-relay']) {
      assert.ok(output.includes(join(dir, 'dist/libexec', helper)), `names ${helper}: ${output}`);
    }
    assert.match(output, /make build/);
  });
});
