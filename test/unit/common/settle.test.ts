import assert from 'node:assert/strict';
import { settleAll } from '../../../src/common/settle.js';

describe('common/settle: settleAll', () => {
  it('returns every value in order', async () => {
    assert.deepEqual(await settleAll([Promise.resolve(1), Promise.resolve('two')]), [1, 'two']);
  });

  it('waits for a slower task before throwing, so its undo is registered before a cleanup unwinds', async () => {
    let slowDone = false;
    const slow = new Promise<void>((resolve) =>
      setTimeout(() => {
        slowDone = true;
        resolve();
      }, 50),
    );
    await assert.rejects(settleAll([slow, Promise.reject(new Error('fast failure'))]), /fast failure/);
    assert.equal(slowDone, true);
  });

  it('throws the first failure in task order, not in time order', async () => {
    const late = new Promise<never>((_, reject) => setTimeout(() => reject(new Error('first task')), 50));
    await assert.rejects(settleAll([late, Promise.reject(new Error('second task'))]), /first task/);
  });
});
