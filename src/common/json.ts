/**
 * JSON with bigint: Stove persists int64 values (nanosecond timestamps, sizes) as tagged decimal strings
 * so they survive a round trip exactly. `JSON.stringify` alone throws on bigint. A string that itself
 * starts with the tag (a label, an annotation, any user string) — or with the escape — is written with
 * the escape character in front, so it never comes back as a number. The escape is NUL, which records
 * written before it existed do not start strings with.
 */

const BIGINT_TAG = 'bigint:';
const ESCAPE = '\u0000';

/** Serialises bigint values as "bigint:<decimal>", escaping strings that would read as one. */
export function stringifyJson(value: unknown, space?: number): string {
  return JSON.stringify(
    value,
    (_k, v: unknown) =>
      typeof v === 'bigint' ? BIGINT_TAG + v.toString() : typeof v === 'string' && (v.startsWith(BIGINT_TAG) || v.startsWith(ESCAPE)) ? ESCAPE + v : v,
    space,
  );
}

/** Parses JSON written by stringifyJson, restoring bigint values and escaped strings. */
export function parseJson<T>(text: string): T {
  return JSON.parse(text, (_k, v: unknown) => {
    if (typeof v !== 'string') return v;
    if (v.startsWith(ESCAPE)) return v.slice(ESCAPE.length);
    return v.startsWith(BIGINT_TAG) && /^-?\d+$/.test(v.slice(BIGINT_TAG.length)) ? BigInt(v.slice(BIGINT_TAG.length)) : v;
  }) as T;
}

/**
 * The first key that appears twice in one object of `text`, which must be valid JSON (parse it first).
 * JSON.parse keeps the last of duplicate keys; formats that must mean one thing to every reader
 * (policies, signed payloads) refuse them instead, as Go's containers/image does. Linear time.
 */
export function duplicateKey(text: string): string | undefined {
  const objects: (Set<string> | undefined)[] = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      let end = i + 1;
      while (text[end] !== '"') end += text[end] === '\\' ? 2 : 1;
      if (expectKey) {
        const key = JSON.parse(text.slice(i, end + 1)) as string;
        const keys = objects[objects.length - 1]!;
        if (keys.has(key)) return key;
        keys.add(key);
        expectKey = false;
      }
      i = end;
    } else if (c === '{') {
      objects.push(new Set());
      expectKey = true;
    } else if (c === '[') {
      objects.push(undefined);
    } else if (c === '}' || c === ']') {
      objects.pop();
      expectKey = false;
    } else if (c === ',') {
      expectKey = objects[objects.length - 1] !== undefined;
    }
  }
  return undefined;
}

/** `JSON.rawJSON` (Node 21+), which TypeScript's ES2024 library does not declare yet. */
const rawJSON = (text: string): unknown => (JSON as unknown as { rawJSON(text: string): unknown }).rawJSON(text);

/**
 * JSON for Go readers of int64 fields (an OCI spec, `runc update --resources -`, verbose status info): a
 * bigint is written as its exact digits, a bare JSON number. (A double would print 9223372036854771712
 * as 9223372036854772000, which is beyond int64 and which Go refuses to decode.)
 */
export function stringifyInt64Json(value: unknown, space?: number): string {
  return JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? rawJSON(v.toString()) : v), space);
}

/** Parses JSON, reading an integer a double cannot hold exactly as a bigint (what stringifyInt64Json wrote). */
export function parseInt64Json<T>(text: string): T {
  return JSON.parse(text, (_k, v: unknown, context?: { source?: string }) =>
    typeof v === 'number' && !Number.isSafeInteger(v) && context?.source !== undefined && /^-?\d+$/.test(context.source) ? BigInt(context.source) : v,
  ) as T;
}
