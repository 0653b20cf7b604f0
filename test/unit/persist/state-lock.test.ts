import assert from 'node:assert/strict';
import { access, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { lockStateDir } from '../../../src/persist/state-lock.js';
import { eventually } from '../../helpers/wait.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

describe('state dir lock', () => {
  const dir = tempDirPerTest('stove-lock-');

  it('writes its pid and removes the file on release', async () => {
    const lock = await lockStateDir(dir());
    assert.equal((await readFile(lock.path, 'utf8')).trim(), String(process.pid));
    await lock.release();
    await assert.rejects(access(lock.path));
  });

  it('takes over a lock whose process is gone', async () => {
    await writeFile(join(dir(), 'stove.pid'), '999999999\n');
    const lock = await lockStateDir(dir());
    assert.equal((await readFile(lock.path, 'utf8')).trim(), String(process.pid));
    await lock.release();
  });

  it('takes over a lock held by a live process that is not a stove daemon (a reused pid)', async () => {
    await writeFile(join(dir(), 'stove.pid'), '1\n');
    const lock = await lockStateDir(dir());
    assert.equal((await readFile(lock.path, 'utf8')).trim(), String(process.pid));
    await lock.release();
  });

  it('refuses while a live stove daemon holds it, naming its pid, and leaves its file alone', async () => {
    // A process whose command line says stove, as a daemon's does.
    const holder = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', 'stove', 'serve'], { stdio: 'ignore' });
    try {
      const pid = holder.pid!;
      await eventually('the holder to run', async () => (await readFile(`/proc/${pid}/cmdline`, 'utf8')).includes('stove'));
      await writeFile(join(dir(), 'stove.pid'), `${pid}\n`);
      await assert.rejects(lockStateDir(dir()), { kind: 'FailedPrecondition', message: new RegExp(`another stove daemon \\(pid ${pid}\\)`) });
      assert.equal((await readFile(join(dir(), 'stove.pid'), 'utf8')).trim(), String(pid));
    } finally {
      holder.kill('SIGKILL');
    }
  });
});
