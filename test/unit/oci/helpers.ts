import assert from 'node:assert/strict';
import { StoveError, type ErrorKind } from '../../../src/common/errors.js';

/** Asserts that fn throws a StoveError of `kind` whose message matches `re`. */
export function throwsKind(fn: () => unknown, kind: ErrorKind, re: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof StoveError, `expected a StoveError, got ${String(err)}`);
    assert.equal(err.kind, kind, `kind of "${err.message}"`);
    assert.match(err.message, re);
    return true;
  });
}

/** Async variant of throwsKind. */
export async function rejectsKind(p: Promise<unknown>, kind: ErrorKind, re: RegExp): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof StoveError, `expected a StoveError, got ${String(err)}`);
    assert.equal(err.kind, kind, `kind of "${err.message}"`);
    assert.match(err.message, re);
    return true;
  });
}
