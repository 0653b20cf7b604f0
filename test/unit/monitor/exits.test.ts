/** Exit files as conmon writes them (temp file renamed over `<id>`), watched and read back. */
import assert from 'node:assert/strict';
import { mkdir, rename, stat, unlink, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createLogger, silentLogger } from '../../../src/common/logger.js';
import { eventually } from '../../helpers/wait.js';
import { ExitWatcher, exitReason, listExits, readExit, waitForExit, wasOomKilled, type ExitRecord } from '../../../src/monitor/exits.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

/**
 * What conmon's g_file_set_contents does: write `<id>.XXXXXX`, then rename it over `<id>`. `finishedAt`
 * sets the mtime first (two writes within a clock tick would otherwise look like one exit).
 */
async function conmonWritesExit(dir: string, id: string, code: number, finishedAt?: Date): Promise<void> {
  const tmp = join(dir, `${id}.A1b2C3`);
  await writeFile(tmp, '');
  await writeFile(tmp, String(code));
  if (finishedAt) await utimes(tmp, finishedAt, finishedAt);
  await rename(tmp, join(dir, id));
}

describe('monitor/exits', () => {
  const dir = tempDirPerTest('stove-exits-');

  it('readExit: code from the content, finish time from the mtime in ns', async () => {
    await conmonWritesExit(dir(), 'c1', 137);
    const record = await readExit(dir(), 'c1');
    const info = await stat(join(dir(), 'c1'), { bigint: true });
    assert.deepEqual(record, { id: 'c1', exitCode: 137, finishedAtNs: info.mtimeNs });
    assert.equal(await readExit(dir(), 'none'), undefined);
  });

  it('the watcher reports each exit once, promptly, and ignores temp names', async () => {
    const seen: { record: ExitRecord; at: number }[] = [];
    const watcher = new ExitWatcher({ exitsDir: dir(), onExit: (record) => void seen.push({ record, at: Date.now() }), log: silentLogger });
    await watcher.start();
    try {
      const wrote = Date.now();
      await conmonWritesExit(dir(), 'c1', 0);
      await conmonWritesExit(dir(), 'c2', 2);
      // A later exit as a marker: once it is reported, a repeat of the first two would have been too.
      await eventually('c1 and c2 reported', () => seen.length >= 2);
      await conmonWritesExit(dir(), 'marker', 0);
      await eventually('the marker reported', () => seen.some((s) => s.record.id === 'marker'));
      assert.deepEqual(seen.filter((s) => s.record.id !== 'marker').map((s) => [s.record.id, s.record.exitCode]).sort(), [['c1', 0], ['c2', 2]]);
      assert.ok(seen.every((s) => s.at - wrote < 1000));
    } finally {
      watcher.stop();
    }
  });

  it('existing exits are reported only with emitExisting; a removed file is forgotten', async () => {
    await conmonWritesExit(dir(), 'old', 1);
    await conmonWritesExit(dir(), 'probe', 0);
    const quiet: string[] = [];
    const w1 = new ExitWatcher({ exitsDir: dir(), onExit: (r) => void quiet.push(r.id), log: silentLogger });
    await w1.start();
    await conmonWritesExit(dir(), 'marker', 0);
    await eventually('the marker reported', () => quiet.includes('marker'));
    w1.stop();
    assert.deepEqual(quiet, ['marker']);
    const loud: string[] = [];
    const w2 = new ExitWatcher({ exitsDir: dir(), onExit: (r) => void loud.push(r.id), log: silentLogger, rescanMs: 20 });
    await w2.start({ emitExisting: true });
    try {
      await eventually('the existing exits reported', () => loud.includes('old') && loud.includes('probe'));
      // A container removed (its exit file with it) and an exit file of that name written again: a new report.
      for (let round = 1; round <= 3; round++) {
        await unlink(join(dir(), 'probe'));
        await conmonWritesExit(dir(), 'probe', round, new Date(Date.now() + round * 1000));
        await eventually(`probe written again ${round} time(s) reported`, () => loud.filter((id) => id === 'probe').length === round + 1);
      }
      // The rescans (every 20 ms) during those rounds did not report the untouched file again.
      assert.deepEqual(loud.filter((id) => id === 'old'), ['old']);
    } finally {
      w2.stop();
    }
  });

  it('a throwing handler is logged and called again with back-off until it succeeds', async () => {
    const lines: { level: string; msg: string; id?: string; attempt?: number; error?: string }[] = [];
    const log = createLogger('debug', (line) => void lines.push(JSON.parse(line) as (typeof lines)[number]));
    const calls: { id: string; at: number }[] = [];
    const handled: string[] = [];
    const onExit = (record: ExitRecord) => {
      calls.push({ id: record.id, at: Date.now() });
      if (['c1', 'c3'].includes(record.id) && calls.filter((c) => c.id === record.id).length <= 2) throw new Error('boom');
      handled.push(record.id);
    };
    // The rescan is off: only the back-off calls the handler again.
    const watcher = new ExitWatcher({ exitsDir: dir(), onExit, log, rescanMs: 0, retry: { initialMs: 50, maxMs: 1000 } });
    await watcher.start();
    try {
      await conmonWritesExit(dir(), 'c1', 0);
      await eventually('c1 handled at the third call', () => handled.includes('c1'));
      assert.deepEqual(
        lines.filter((l) => l.msg === 'exit handler failed').map((l) => [l.level, l.id, l.attempt, l.error]),
        [['error', 'c1', 1, 'boom'], ['error', 'c1', 2, 'boom']],
      );
      const c1 = calls.filter((c) => c.id === 'c1').map((c) => c.at);
      assert.equal(c1.length, 3);
      // Back-off doubles: 50 ms, then 100 ms (timers fire no earlier than asked).
      assert.ok(c1[1]! - c1[0]! >= 45 && c1[2]! - c1[1]! >= 95, `gaps ${c1[1]! - c1[0]!} and ${c1[2]! - c1[1]!} ms`);
      // The watcher carries on with the next exits, and a handled exit is not called again: c3's
      // back-off (150 ms) is the window.
      await conmonWritesExit(dir(), 'c2', 0);
      await conmonWritesExit(dir(), 'c3', 0);
      await eventually('the next exits handled', () => handled.includes('c2') && handled.includes('c3'));
      assert.equal(calls.filter((c) => c.id === 'c1').length, 3);
    } finally {
      watcher.stop();
    }
  });

  it('retries stop when the exit file is gone (the container was removed)', async () => {
    const calls = new Map<string, number>();
    const onExit = (record: ExitRecord) => {
      calls.set(record.id, (calls.get(record.id) ?? 0) + 1);
      throw new Error('still failing');
    };
    const watcher = new ExitWatcher({ exitsDir: dir(), onExit, log: silentLogger, rescanMs: 0, retry: { initialMs: 30, maxMs: 30 } });
    await watcher.start();
    const count = (id: string) => calls.get(id) ?? 0;
    try {
      await conmonWritesExit(dir(), 'gone', 1);
      await eventually('a few calls', () => count('gone') >= 3);
      await unlink(join(dir(), 'gone'));
      // A second failing exit as the clock: five of its calls are four back-off periods.
      await conmonWritesExit(dir(), 'clock', 1);
      await eventually('the clock reported', () => count('clock') >= 1);
      const atRemoval = count('gone');
      await eventually('four back-off periods', () => count('clock') >= 5);
      // At most the call under way when the file went.
      assert.ok(count('gone') <= atRemoval + 1, `${count('gone') - atRemoval} calls after the removal`);
    } finally {
      watcher.stop();
    }
  });

  it('listExits and waitForExit', async () => {
    await conmonWritesExit(dir(), 'a', 0);
    await writeFile(join(dir(), 'b.XyZ123'), '5');
    assert.deepEqual((await listExits(dir())).map((r) => r.id), ['a']);
    assert.deepEqual(await listExits(join(dir(), 'missing')), []);
    // Waiting before the file exists: it is written while waitForExit polls.
    const late = waitForExit(dir(), 'late', 5000);
    await conmonWritesExit(dir(), 'late', 9);
    assert.equal((await late)?.exitCode, 9);
    assert.equal(await waitForExit(dir(), 'never', 50), undefined);
  });

  it('OOM and the CRI reason', async () => {
    const persist = join(dir(), 'persist');
    await mkdir(persist);
    assert.equal(await wasOomKilled(persist), false);
    await writeFile(join(persist, 'oom'), '');
    assert.equal(await wasOomKilled(join(dir(), 'nope'), persist), true);
    assert.equal(exitReason(0, false), 'Completed');
    assert.equal(exitReason(1, false), 'Error');
    assert.equal(exitReason(137, true), 'OOMKilled');
  });
});
