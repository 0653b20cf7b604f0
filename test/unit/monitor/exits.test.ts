/** Exit files as conmon writes them (temp file renamed over `<id>`), watched and read back. */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rename, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, silentLogger } from '../../../src/common/logger.js';
import { eventually } from '../../helpers/wait.js';
import { ExitWatcher, exitReason, listExits, oomRecordedWithin, readExit, waitForExit, wasOomKilled, type ExitRecord } from '../../../src/monitor/exits.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

/** What conmon's g_file_set_contents does: write `<id>.XXXXXX`, then rename it over `<id>`. */
async function conmonWritesExit(dir: string, id: string, code: number): Promise<void> {
  const tmp = join(dir, `${id}.A1b2C3`);
  await writeFile(tmp, '');
  await writeFile(tmp, String(code));
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

  it('existing exits are reported only with emitExisting; forget() allows a new report', async () => {
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
    await eventually('the existing exits reported', () => loud.includes('old') && loud.includes('probe'));
    // Rescans as markers: only a rescan reports a forgotten exit again, so each further report of the
    // probe is one more rescan, and none of those may repeat the exit that was not forgotten.
    for (let rescans = 1; rescans <= 5; rescans++) {
      w2.forget('probe');
      await eventually(`rescan ${rescans} reporting the forgotten probe`, () => loud.filter((id) => id === 'probe').length === rescans + 1);
    }
    assert.deepEqual(loud.filter((id) => id === 'old'), ['old']);
    w2.forget('old');
    await eventually('a rescan reporting it again', () => loud.filter((id) => id === 'old').length === 2);
    w2.stop();
  });

  it('a throwing handler is logged, not fatal', async () => {
    const lines: { level: string; msg: string; id?: string; error?: string }[] = [];
    const log = createLogger('debug', (line) => void lines.push(JSON.parse(line) as (typeof lines)[number]));
    const handled: string[] = [];
    const onExit = (record: ExitRecord) => {
      if (record.id === 'c1') throw new Error('boom');
      handled.push(record.id);
    };
    const watcher = new ExitWatcher({ exitsDir: dir(), onExit, log });
    await watcher.start();
    try {
      await conmonWritesExit(dir(), 'c1', 0);
      await eventually('the failure logged', () => lines.some((l) => l.msg === 'exit handler failed'));
      assert.deepEqual(
        lines.filter((l) => l.msg === 'exit handler failed').map((l) => [l.level, l.id, l.error]),
        [['error', 'c1', 'boom']],
      );
      // The watcher carries on with the next exit.
      await conmonWritesExit(dir(), 'c2', 0);
      await eventually('the next exit handled', () => handled.includes('c2'));
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

describe('monitor: an oom file that comes after the exit', () => {
  it('is seen when conmon writes it within the grace time, and not waited for beyond it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'stove-oom-'));
    try {
      const late = setTimeout(() => void writeFile(join(dir, 'oom'), ''), 100);
      const started = Date.now();
      assert.equal(await oomRecordedWithin(2000, dir), true);
      clearTimeout(late);
      assert.ok(Date.now() - started < 1500, 'returned once the file was there');
      await rm(join(dir, 'oom'));
      const before = Date.now();
      assert.equal(await oomRecordedWithin(150, dir), false);
      assert.ok(Date.now() - before >= 150);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
