import assert from 'node:assert/strict';
import { SingleFlight } from '../../../src/common/locks.js';
import { Semaphore } from '../../../src/images/pull.js';

/** A body that runs until the test ends it, and records the signal it was given. */
function heldBody() {
  const state = { runs: 0, signal: undefined as AbortSignal | undefined, finish: (_v: string) => {} };
  const body = (signal: AbortSignal) => {
    state.runs++;
    state.signal = signal;
    return new Promise<string>((resolve, reject) => {
      state.finish = resolve;
      signal.addEventListener('abort', () => reject(new Error('body aborted')));
    });
  };
  return { state, body };
}

/** One held run joined by two callers, each with a signal of its own. */
function twoCallers() {
  const flights = new SingleFlight<string>();
  const { state, body } = heldBody();
  const a = new AbortController();
  const b = new AbortController();
  return { flights, state, body, a, b, first: flights.run('k', body, a.signal), second: flights.run('k', body, b.signal) };
}

describe('common/locks: SingleFlight with callers that leave', () => {
  it('shares one run; one caller leaving rejects only that caller, and the run goes on for the other', async () => {
    const { state, a, first, second } = twoCallers();
    assert.equal(state.runs, 1);
    a.abort(new Error('a left'));
    await assert.rejects(first, /a left/);
    assert.equal(state.signal!.aborted, false, 'the run goes on while b waits');
    state.finish('done');
    assert.equal(await second, 'done');
  });

  it('aborts the run once every caller left, and the next caller starts a new run', async () => {
    const { flights, state, body, a, b, first, second } = twoCallers();
    a.abort(new Error('a left'));
    b.abort(new Error('b left'));
    await assert.rejects(first, /a left/);
    await assert.rejects(second, /b left/);
    assert.equal(state.signal!.aborted, true);
    assert.match(String((state.signal!.reason as Error).message), /b left/);
    const third = flights.run('k', body);
    assert.equal(state.runs, 2, 'an aborted run is not joined');
    state.finish('again');
    assert.equal(await third, 'again');
  });

  it('never aborts a run a caller without a signal waits for, and refuses a caller that already left', async () => {
    const flights = new SingleFlight<string>();
    const { state, body } = heldBody();
    const a = new AbortController();
    const pinned = flights.run('k', body);
    const leaving = flights.run('k', body, a.signal);
    a.abort(new Error('a left'));
    await assert.rejects(leaving, /a left/);
    assert.equal(state.signal!.aborted, false);
    await assert.rejects(flights.run('k', body, a.signal), /a left/);
    state.finish('kept');
    assert.equal(await pinned, 'kept');
  });
});

describe('images/pull: Semaphore', () => {
  it('gives a waiter that leaves no slot, and the slot to the next waiter', async () => {
    const slots = new Semaphore(1);
    const release = await slots.acquire();
    const a = new AbortController();
    const leaving = slots.acquire(a.signal);
    let gotNext = false;
    const next = slots.acquire().then((r) => ((gotNext = true), r));
    a.abort(new Error('left'));
    await assert.rejects(leaving, /left/);
    assert.equal(gotNext, false, 'no slot while the only one is held');
    release();
    (await next)();
    await assert.rejects(slots.acquire(a.signal), /left/, 'an aborted signal gets no slot');
  });
});
