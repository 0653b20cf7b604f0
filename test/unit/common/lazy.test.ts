/** loadPart: a lazily loaded part that cannot be loaded fails with its name and the remedy. */
import assert from 'node:assert/strict';
import { isKind } from '../../../src/common/errors.js';
import { loadPart } from '../../../src/common/lazy.js';

describe('loadPart', () => {
  it('returns the loaded module', async () => {
    const path = await loadPart('path helpers', () => import('node:path'));
    assert.equal(path.posix.join('a', 'b'), 'a/b');
  });

  it('names the part and says to restart when its file is gone', async () => {
    const missing = new URL('./no-such-chunk-0000.js', import.meta.url).href;
    const err: unknown = await loadPart('registry client', () => import(missing)).then(
      () => assert.fail('loaded a missing file'),
      (e: unknown) => e,
    );
    assert.ok(isKind(err, 'Internal'));
    assert.match((err as Error).message, /^cannot load Stove's registry client \(were its files removed while the daemon runs\? restart it\): .*no-such-chunk-0000\.js/);
  });
});
