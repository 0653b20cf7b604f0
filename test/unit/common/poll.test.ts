/** The one polling loop (src/common/poll.ts): found value, deadline, back-off, abort, errors. */
import assert from 'node:assert/strict';
import { poll, pollUntil } from '../../../src/common/poll.js';

describe('poll', () => {
  it('returns the first value the look finds, without waiting when it is there at once', async () => {
    const started = performance.now();
    assert.equal(await poll(() => 'here', { timeoutMs: 1000 }), 'here');
    assert.ok(performance.now() - started < 50);
    let n = 0;
    assert.equal(await poll(() => (++n === 3 ? n : undefined), { timeoutMs: 5000, intervalMs: 1 }), 3);
  });

  it('keeps null and false as found values (only undefined means not yet)', async () => {
    assert.equal(await poll(() => null, { timeoutMs: 100 }), null);
    assert.equal(await poll(() => false, { timeoutMs: 100 }), false);
  });

  it('gives up at the deadline with undefined, after a last look at it', async () => {
    const looks: number[] = [];
    const started = performance.now();
    const found = await poll(
      () => {
        looks.push(performance.now() - started);
        return undefined;
      },
      { timeoutMs: 120, intervalMs: 10, maxIntervalMs: 40 },
    );
    assert.equal(found, undefined);
    assert.ok(looks.at(-1)! >= 115, `last look at ${looks.at(-1)} ms`); // timers may fire a millisecond early
    // 0, 10, 30, 70, 110 (then 120): the pauses double up to 40 ms, so about six looks, never dozens.
    assert.ok(looks.length >= 4 && looks.length <= 8, `${looks.length} looks`);
  });

  it('backs off from intervalMs to maxIntervalMs', async () => {
    const looks: number[] = [];
    await poll(
      () => {
        looks.push(performance.now());
        return looks.length === 6 ? true : undefined;
      },
      { timeoutMs: 10_000, intervalMs: 8, maxIntervalMs: 32 },
    );
    const gaps = looks.slice(1).map((t, i) => t - looks[i]!);
    // 8, 16, 32, 32, 32 (timers fire late, not early, on a loaded machine); the cap is in the test above
    assert.ok(gaps[0]! >= 7 && gaps[1]! >= 15 && gaps[2]! >= 31 && gaps[4]! >= 31, gaps.join(', '));
  });

  it('rejects with the signal reason when aborted while waiting, and at once when aborted before', async () => {
    const ac = new AbortController();
    const waiting = poll(() => undefined, { timeoutMs: 10_000, intervalMs: 50, signal: ac.signal });
    setTimeout(() => ac.abort(new Error('stop now')), 20);
    await assert.rejects(waiting, /stop now/);
    let looked = false;
    await assert.rejects(
      poll(
        () => {
          looked = true;
          return 1;
        },
        { timeoutMs: 1000, signal: AbortSignal.abort(new Error('already')) },
      ),
      /already/,
    );
    assert.equal(looked, false);
  });

  it('ends with the error the look throws', async () => {
    await assert.rejects(
      poll(
        () => {
          throw new Error('EACCES');
        },
        { timeoutMs: 1000 },
      ),
      /EACCES/,
    );
  });

  it('pollUntil: true once the condition holds, false at the deadline', async () => {
    let n = 0;
    assert.equal(await pollUntil(() => ++n > 2, { timeoutMs: 5000, intervalMs: 1 }), true);
    assert.equal(await pollUntil(async () => false, { timeoutMs: 30, intervalMs: 5 }), false);
  });
});
