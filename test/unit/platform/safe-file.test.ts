import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFile, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createFileNoFollow, readUntrustedFile } from '../../../src/platform/safe-file.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

describe('platform/safe-file: files a container or an image controls', () => {
  const dir = tempDirPerTest('stove-safe-file-');

  it('reads a regular file up to the cap, and refuses one over it', async () => {
    await writeFile(join(dir(), 'f'), 'x'.repeat(100));
    assert.equal((await readUntrustedFile(join(dir(), 'f'), 100)).length, 100);
    await assert.rejects(readUntrustedFile(join(dir(), 'f'), 99, '/etc/passwd'), { code: 'EFBIG', message: /"\/etc\/passwd" is larger than the 99-byte limit/ });
  });

  it('refuses a FIFO without blocking, a character device without reading it, and a symlink', async () => {
    execFileSync('mkfifo', [join(dir(), 'fifo')]);
    await assert.rejects(readUntrustedFile(join(dir(), 'fifo'), 1 << 20, 'fifo'), { code: 'ENOTREG', message: /"fifo" is a FIFO, not a regular file/ });
    await assert.rejects(readUntrustedFile('/dev/zero', 1 << 20), { code: 'ENOTREG', message: /a character device/ });
    await symlink('/etc/hostname', join(dir(), 'link'));
    await assert.rejects(readUntrustedFile(join(dir(), 'link'), 1 << 20), { code: 'ELOOP' });
    await assert.rejects(readUntrustedFile(join(dir(), 'missing'), 1 << 20), { code: 'ENOENT' });
  });

  it('creates a file without following a symlink, and appends to an existing regular one', async () => {
    assert.equal(await createFileNoFollow(join(dir(), 'new.log'), 0o640), true);
    await writeFile(join(dir(), 'new.log'), 'kept');
    assert.equal(await createFileNoFollow(join(dir(), 'new.log'), 0o640), false);
    assert.equal(await readFile(join(dir(), 'new.log'), 'utf8'), 'kept');
    await symlink(join(dir(), 'target'), join(dir(), 'link.log'));
    await assert.rejects(createFileNoFollow(join(dir(), 'link.log'), 0o640), { code: 'ELOOP' });
    await assert.rejects(readFile(join(dir(), 'target')), { code: 'ENOENT' });
    execFileSync('mkfifo', [join(dir(), 'fifo.log')]);
    await assert.rejects(createFileNoFollow(join(dir(), 'fifo.log'), 0o640), { code: 'ENXIO' });
  });
});
