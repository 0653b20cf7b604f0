/**
 * The single-use token cache behind streaming URLs, after the kubelet's request cache: a token maps to
 * the CRI request it was issued for, is consumed by its first use, expires after a TTL, and at most
 * `maxInFlight` tokens exist at once. Tokens are 16 crypto-random bytes in base64url (22 characters;
 * the kubelet uses 6 bytes, nothing depends on the length), so a URL cannot be guessed.
 */
import { randomBytes } from 'node:crypto';
import { StoveError } from '../common/errors.js';

export interface TokenCacheOptions {
  ttlMs: number;
  maxInFlight: number;
  /** Monotonic milliseconds clock, replaceable in tests. */
  now?: () => number;
}

interface Entry<T> {
  value: T;
  expiresAt: number;
}

export class TokenCache<T> {
  // A Map iterates in insertion order, and every entry has the same TTL, so expiry order is insertion order.
  private readonly entries = new Map<string, Entry<T>>();
  private readonly now: () => number;

  constructor(private readonly options: TokenCacheOptions) {
    this.now = options.now ?? (() => performance.now());
  }

  /** Stores value under a fresh token; RESOURCE_EXHAUSTED when too many are outstanding. */
  insert(value: T): string {
    this.collect();
    if (this.entries.size >= this.options.maxInFlight) {
      throw new StoveError('ResourceExhausted', 'maximum number of in-flight requests exceeded');
    }
    let token: string;
    do token = randomBytes(16).toString('base64url');
    while (this.entries.has(token));
    this.entries.set(token, { value, expiresAt: this.now() + this.options.ttlMs });
    return token;
  }

  /** The value for token, removing it; undefined when unknown, already used or expired. */
  consume(token: string): T | undefined {
    const entry = this.entries.get(token);
    if (!entry) return undefined;
    this.entries.delete(token);
    return entry.expiresAt > this.now() ? entry.value : undefined;
  }

  /** Outstanding (unexpired, unused) tokens. */
  get size(): number {
    this.collect();
    return this.entries.size;
  }

  private collect(): void {
    const now = this.now();
    for (const [token, entry] of this.entries) {
      if (entry.expiresAt > now) break;
      this.entries.delete(token);
    }
  }
}
