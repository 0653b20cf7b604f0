/** conmon's newline-delimited JSON on the sync and attach pipes. */
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { SyncPipeReader, parseSyncLine } from '../../../src/monitor/sync-pipe.js';

describe('monitor/sync-pipe', () => {
  it('parses each key conmon uses, with and without a message', () => {
    assert.deepEqual(parseSyncLine('{"pid": 19138}'), { value: 19138 });
    assert.deepEqual(parseSyncLine('{"exit_code": -1, "message": "command timed out"}'), { value: -1, message: 'command timed out' });
    assert.deepEqual(parseSyncLine('{"data": 5}'), { value: 5 });
    assert.deepEqual(parseSyncLine('{"pid": -1, "message": "a\\"b\\nc"}'), { value: -1, message: 'a"b\nc' });
    assert.equal(parseSyncLine('not json').value, -1);
  });

  it('reads messages split across chunks, in order, then undefined at EOF', async () => {
    const stream = new PassThrough();
    const reader = new SyncPipeReader(stream);
    stream.write('{"data": ');
    const fail = () => new Error('timeout');
    // The rest arrives while the reader waits for its first message.
    const first = reader.next(1000, fail);
    await new Promise((r) => setImmediate(r));
    stream.end('12}\n{"data": 0}\n{"data": 3}');
    assert.deepEqual(await first, { value: 12 });
    assert.deepEqual(await reader.next(1000, fail), { value: 0 });
    assert.deepEqual(await reader.next(1000, fail), { value: 3 });
    assert.equal(await reader.next(1000, fail), undefined);
  });

  it('times out with the caller\'s error', async () => {
    const reader = new SyncPipeReader(new PassThrough());
    await assert.rejects(reader.next(20, () => new Error('too slow')), /too slow/);
    reader.close();
  });
});
