import assert from 'node:assert/strict';
import { StoveError } from '../../../src/common/errors.js';
import { TokenCache } from '../../../src/streaming/tokens.js';

describe('streaming token cache', () => {
  let now = 0;
  const cache = (maxInFlight = 1000, ttlMs = 60_000) => new TokenCache<string>({ ttlMs, maxInFlight, now: () => now });

  beforeEach(() => (now = 1_000_000));

  it('issues unguessable url-safe tokens, each different', () => {
    const c = cache();
    const tokens = new Set<string>();
    for (let i = 0; i < 500; i++) {
      const t = c.insert(`v${i}`);
      assert.match(t, /^[A-Za-z0-9_-]{22}$/);
      tokens.add(t);
    }
    assert.equal(tokens.size, 500);
  });

  it('hands a value out once', () => {
    const c = cache();
    const t = c.insert('exec-request');
    assert.equal(c.consume(t), 'exec-request');
    assert.equal(c.consume(t), undefined);
    assert.equal(c.consume('never-issued'), undefined);
  });

  it('forgets a token after its TTL', () => {
    const c = cache(1000, 60_000);
    const t1 = c.insert('a');
    now += 59_999;
    const t2 = c.insert('b');
    assert.equal(c.consume(t1), 'a');
    now += 60_000;
    assert.equal(c.consume(t2), undefined);
  });

  it('refuses more than maxInFlight outstanding tokens with RESOURCE_EXHAUSTED, until some are used or expire', () => {
    const c = cache(1000);
    const tokens = Array.from({ length: 1000 }, (_, i) => c.insert(String(i)));
    assert.equal(c.size, 1000);
    assert.throws(
      () => c.insert('one too many'),
      (err: unknown) => err instanceof StoveError && err.kind === 'ResourceExhausted' && /maximum number of in-flight requests exceeded/.test(err.message),
    );
    c.consume(tokens[0]!);
    c.insert('fits again');
    assert.throws(() => c.insert('full again'));
    now += 60_001;
    assert.equal(c.size, 0);
    c.insert('after expiry');
  });
});
