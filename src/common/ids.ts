/** 64-hex identifiers, as containerd and CRI-O use, resolvable by unique prefix. */
import { randomBytes } from 'node:crypto';
import { invalidArgument, notFound } from './errors.js';

/** A fresh random 64-hex ID. */
export function newId(): string {
  return randomBytes(32).toString('hex');
}

/**
 * Finds the one ID in `ids` equal to or starting with `prefix`. An empty prefix, no match or several
 * matches are errors naming what was asked for.
 */
export function resolveIdPrefix(ids: Iterable<string>, prefix: string, what: string): string {
  if (!prefix) throw invalidArgument(`${what} ID must not be empty`);
  const matches: string[] = [];
  for (const id of ids) {
    if (id === prefix) return id;
    if (id.startsWith(prefix)) matches.push(id);
  }
  if (matches.length === 0) throw notFound(`${what} "${prefix}" not found`);
  if (matches.length > 1) throw invalidArgument(`${what} ID prefix "${prefix}" is ambiguous: matches ${matches.length} ${what}s`);
  return matches[0]!;
}

/** Short form of an ID for messages and logs. */
export function shortId(id: string): string {
  return id.slice(0, 12);
}
