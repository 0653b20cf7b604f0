import assert from 'node:assert/strict';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { silentLogger } from '../../../src/common/logger.js';
import { Quarantine, readQuarantine } from '../../../src/persist/quarantine.js';
import { RecordStore } from '../../../src/persist/record-store.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

describe('persist/quarantine: unreadable records are kept, and so is what they describe', () => {
  const dir = tempDirPerTest('stove-quarantine-');

  it('moves an unreadable or foreign record away, keeps its dir, and still removes dirs of interrupted creates', async () => {
    const records = join(dir(), 'containers');
    const write = async (id: string, text?: string) => {
      await mkdir(join(records, id, 'fs'), { recursive: true });
      if (text !== undefined) await writeFile(join(records, id, 'container.json'), text);
    };
    await write('good', JSON.stringify({ id: 'good' }));
    await write('garbage', '{"id": "garb');
    await write('foreign', JSON.stringify({ id: 'someone-else' }));
    await write('interrupted');
    const quarantine = new Quarantine(join(dir(), 'quarantine'), silentLogger);
    await quarantine.load();
    const store = new RecordStore<{ id: string }>(records, 'container.json', 'container', quarantine);
    assert.deepEqual((await store.load(silentLogger)).map((r) => r.id), ['good']);
    assert.deepEqual([...store.quarantinedIds()].sort(), ['foreign', 'garbage']);
    assert.deepEqual((await readdir(records)).sort(), ['foreign', 'garbage', 'good'], 'only the dir without a record went');
    assert.deepEqual(await readdir(join(records, 'garbage')), ['fs']);

    // A later start: the entries still protect their dirs, and are listed with where they came from.
    const entries = await readQuarantine(join(dir(), 'quarantine'));
    assert.deepEqual(entries.map((e) => [e.kind, e.id, e.from]).sort(), [
      ['container', 'foreign', join(records, 'foreign', 'container.json')],
      ['container', 'garbage', join(records, 'garbage', 'container.json')],
    ]);
    assert.equal(await readFile(entries.find((e) => e.id === 'garbage')!.path, 'utf8'), '{"id": "garb');
    const again = new Quarantine(join(dir(), 'quarantine'), silentLogger);
    await again.load();
    const next = new RecordStore<{ id: string }>(records, 'container.json', 'container', again);
    await next.load(silentLogger);
    assert.deepEqual((await readdir(records)).sort(), ['foreign', 'garbage', 'good']);
  });
});
