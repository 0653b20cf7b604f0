import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigDirs, readSmallFile } from '../../../src/platform/config-dirs.js';
import { silentLogger } from '../../../src/common/logger.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

describe('config dirs', () => {
  const dir = tempDirPerTest('stove-config-dirs-');

  it('loads a file again only when it changed, and says whether anything changed', async () => {
    const loads: string[] = [];
    const dirs = new ConfigDirs<string>({ dirs: [dir(), join(dir(), 'missing')], accept: (n) => n.endsWith('.json'), load: async (p) => (loads.push(p), readSmallFile(p, 100)), log: silentLogger });
    await writeFile(join(dir(), 'a.json'), 'one');
    await writeFile(join(dir(), 'skip.txt'), 'x');
    execFileSync('mkfifo', [join(dir(), 'fifo.json')]); // never opened: it would block
    await mkdir(join(dir(), 'dir.json'));
    let scan = await dirs.scan();
    assert.deepEqual(scan.files.map((f) => [f.name, f.priority, f.loaded]), [['a.json', 0, 'one']]);
    assert.equal(scan.changed, true);
    scan = await dirs.scan();
    assert.equal(scan.changed, false);
    assert.equal(loads.length, 1);
    await writeFile(join(dir(), 'a.json'), 'three');
    scan = await dirs.scan();
    assert.equal(scan.changed, true);
    assert.equal(scan.files[0]!.loaded, 'three');
    assert.equal(loads.length, 2);
  });

  it('never answers a call with a scan that started before it', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let first = true;
    let entered!: () => void;
    const inFirstScan = new Promise<void>((r) => (entered = r));
    const dirs = new ConfigDirs<string>({
      dirs: [dir()],
      accept: () => true,
      load: async (p) => {
        if (first) {
          first = false;
          entered();
          await gate; // the first scan is stuck in its first file
        }
        return p;
      },
      log: silentLogger,
    });
    await writeFile(join(dir(), 'a'), '');
    const early = dirs.scan();
    await inFirstScan;
    await writeFile(join(dir(), 'b'), ''); // written while the first scan runs
    const late = dirs.scan();
    const later = dirs.scan();
    release();
    assert.deepEqual((await early).files.map((f) => f.name), ['a']);
    assert.deepEqual((await late).files.map((f) => f.name), ['a', 'b']);
    assert.equal(await later, await late, 'callers during a scan share the next one');
  });

  it('refuses a file larger than the limit', async () => {
    await writeFile(join(dir(), 'big'), 'x'.repeat(101));
    await assert.rejects(readSmallFile(join(dir(), 'big'), 100), /larger than 100 bytes/);
    await writeFile(join(dir(), 'ok'), 'x'.repeat(100));
    assert.equal((await readSmallFile(join(dir(), 'ok'), 100)).length, 100);
  });
});
