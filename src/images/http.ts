/**
 * undici, the registry client's HTTP stack, loaded on the first registry request: a node that does
 * not pull does not pay for it (several MiB of the idle daemon's resident set).
 */
import type * as Undici from 'undici';

let loading: Promise<typeof Undici> | undefined;

export function undici(): Promise<typeof Undici> {
  loading ??= import('undici');
  return loading;
}
