import assert from 'node:assert/strict';
import { settleAll } from '../../../src/common/settle.js';

describe('common/settle: settleAll', () => {
  it('returns every value in order', async () => {
    assert.deepEqual(await settleAll([Promise.resolve(1), Promise.resolve('two')]), [1, 'two']);
  });

  /** A task that ends when the test says so. */
  function held<T>(): { task: Promise<T>; resolve: (v: T) => void; reject: (e: Error) => void } {
    let resolve!: (v: T) => void;
    let reject!: (e: Error) => void;
    const task = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
    return { task, resolve, reject };
  }

  /** Whether `all` has settled yet. */
  function watch(all: Promise<unknown>): () => boolean {
    let settled = false;
    all.then(
      () => (settled = true),
      () => (settled = true),
    );
    return () => settled;
  }

  it('waits for a slower task before throwing, so its undo is registered before a cleanup unwinds', async () => {
    const slow = held<void>();
    const all = settleAll([slow.task, Promise.reject(new Error('fast failure'))]);
    const settled = watch(all);
    await new Promise((r) => setImmediate(r)); // every callback of the fast failure has run
    assert.equal(settled(), false, 'settleAll gave up before the slower task ended');
    slow.resolve();
    await assert.rejects(all, /fast failure/);
  });

  it('throws the first failure in task order, not in time order', async () => {
    const late = held<never>();
    const all = settleAll([late.task, Promise.reject(new Error('second task'))]);
    await new Promise((r) => setImmediate(r));
    late.reject(new Error('first task'));
    await assert.rejects(all, /first task/);
  });
});
