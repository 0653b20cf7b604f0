/**
 * JSON with bigint: Stove persists int64 values (nanosecond timestamps, sizes) as tagged decimal strings
 * so they survive a round trip exactly. `JSON.stringify` alone throws on bigint.
 */

const BIGINT_TAG = 'bigint:';

/** Serialises bigint values as "bigint:<decimal>". */
export function stringifyJson(value: unknown, space?: number): string {
  return JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? BIGINT_TAG + v.toString() : v), space);
}

/** Parses JSON written by stringifyJson, restoring bigint values. */
export function parseJson<T>(text: string): T {
  return JSON.parse(text, (_k, v) =>
    typeof v === 'string' && v.startsWith(BIGINT_TAG) && /^-?\d+$/.test(v.slice(BIGINT_TAG.length))
      ? BigInt(v.slice(BIGINT_TAG.length))
      : v,
  ) as T;
}
