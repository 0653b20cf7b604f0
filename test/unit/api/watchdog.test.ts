/** The transport's sweep of long limits: fires late by at most a period, never after cancel, idles when empty. */
import assert from 'node:assert/strict';
import { Watchdog } from '../../../src/api/grpc-http2.js';
import { eventually } from '../../helpers/wait.js';

describe('api: Watchdog', () => {
  it('fires a watched key once its time has passed, within one period, and not before', async () => {
    const dog = new Watchdog(10);
    const started = performance.now();
    let firedAt: number | undefined;
    let fired = 0;
    dog.watch({}, 60, () => {
      fired++;
      firedAt = performance.now() - started;
    });
    await eventually('the limit fired', () => firedAt !== undefined, 2000);
    assert.ok(firedAt! >= 59, `fired after ${firedAt!.toFixed(0)} ms, before its limit`);
    // Once the sweep has stopped nothing can fire any more: then it is known to have fired once.
    await eventually('the sweep stopped', () => !dog.sweeping, 2000);
    assert.equal(fired, 1, 'fired once');
  });

  it('never fires a cancelled key, and keeps the others', async () => {
    const dog = new Watchdog(10);
    const cancelled = {};
    const kept = {};
    const fired: string[] = [];
    dog.watch(cancelled, 20, () => fired.push('cancelled'));
    dog.watch(kept, 20, () => fired.push('kept'));
    dog.cancel(cancelled);
    await eventually('the kept limit fired', () => fired.length > 0, 2000);
    await eventually('the sweep stopped', () => !dog.sweeping, 2000);
    assert.deepEqual(fired, ['kept']);
  });

  it('fires the other due keys when one of them throws', async () => {
    const dog = new Watchdog(10);
    const fired: string[] = [];
    dog.watch({}, 5, () => {
      fired.push('first');
      throw new Error('ending this call failed');
    });
    dog.watch({}, 5, () => fired.push('second'));
    await eventually('both fired', () => fired.length === 2, 2000);
    assert.deepEqual(fired.sort(), ['first', 'second']);
  });

  it('stops its sweep once nothing is watched (an idle daemon has no timer of it)', async () => {
    const dog = new Watchdog(10);
    assert.equal(dog.sweeping, false);
    const key = {};
    dog.watch(key, 1000, () => {});
    assert.equal(dog.sweeping, true);
    dog.cancel(key);
    await eventually('the sweep stopped', () => !dog.sweeping, 2000);
  });
});
