import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { silentLogger } from '../../../src/common/logger.js';
import { PullProgress, type PullSnapshot } from '../../../src/images/progress.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';
import { eventually } from '../../helpers/wait.js';

/** How many timers `fn` arms. */
function timersArmedBy(fn: () => void): number {
  const original = globalThis.setTimeout;
  let armed = 0;
  globalThis.setTimeout = ((...args: Parameters<typeof setTimeout>) => {
    armed++;
    return original(...args);
  }) as typeof setTimeout;
  try {
    fn();
  } finally {
    globalThis.setTimeout = original;
  }
  return armed;
}

describe('images/progress: PullProgress', () => {
  const dir = tempDirPerTest('stove-progress-');

  it('keeps the snapshot of a failed pull: a layer download it shared with another pull writes no more', async () => {
    const file = join(dir(), 'pulls', 'snapshot.json');
    const layer = { digest: 'sha256:' + 'a'.repeat(64), size: 100 };
    const progress = new PullProgress('registry.test/app:1', file, silentLogger);
    progress.setLayers([layer]);
    await progress.fail(new Error('the client went away'));
    const written = async () => JSON.parse(await readFile(file, 'utf8')) as PullSnapshot;
    await eventually('the failed snapshot is written', async () => (await written()).error === 'the client went away');

    assert.equal(timersArmedBy(() => {
      progress.state(layer.digest, 'downloading');
      progress.bytes(layer.digest, 60);
    }), 0, 'no write scheduled after the pull failed');
  });

  it('schedules a write for progress while the pull runs', async () => {
    const file = join(dir(), 'pulls', 'snapshot.json');
    const layer = { digest: 'sha256:' + 'b'.repeat(64), size: 100 };
    const progress = new PullProgress('registry.test/app:2', file, silentLogger);
    progress.setLayers([layer]);
    await eventually('the first snapshot is written', async () => (JSON.parse(await readFile(file, 'utf8')) as PullSnapshot).state === 'pulling');
    assert.equal(timersArmedBy(() => progress.bytes(layer.digest, 60)), 1);
    await progress.finish('sha256:' + 'c'.repeat(64));
    await eventually('the finished snapshot is written', async () => (JSON.parse(await readFile(file, 'utf8')) as PullSnapshot).state === 'done');
  });

  it('finish and fail resolve once their snapshot is on disk (stove pull draws it when the call returns)', async () => {
    const layer = { digest: 'sha256:' + 'd'.repeat(64), size: 100 };
    const done = join(dir(), 'pulls', 'done.json');
    const finished = new PullProgress('registry.test/app:3', done, silentLogger);
    finished.setLayers([layer]);
    finished.state(layer.digest, 'downloading');
    await finished.finish('sha256:' + 'e'.repeat(64));
    const snapshot = JSON.parse(await readFile(done, 'utf8')) as PullSnapshot;
    assert.equal(snapshot.state, 'done');
    assert.equal(snapshot.imageId, 'sha256:' + 'e'.repeat(64));

    const failedFile = join(dir(), 'pulls', 'failed.json');
    const failed = new PullProgress('registry.test/app:4', failedFile, silentLogger);
    await failed.fail(new Error('manifest unknown'));
    assert.equal((JSON.parse(await readFile(failedFile, 'utf8')) as PullSnapshot).error, 'manifest unknown');
  });

  it('finish resolves even when the snapshot cannot be written', async () => {
    const progress = new PullProgress('registry.test/app:5', '/dev/null/pulls/x.json', silentLogger);
    await progress.finish('sha256:' + 'f'.repeat(64));
  });
});
