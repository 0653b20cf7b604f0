/**
 * undici, the registry client's HTTP stack, loaded on the first registry request: a node that does
 * not pull does not pay for it (several MiB of the idle daemon's resident set).
 */
import { loadPart } from '../common/lazy.js';

type UndiciApi = typeof import('./undici-api.js');

let loading: Promise<UndiciApi> | undefined;

export function undici(): Promise<UndiciApi> {
  loading ??= loadPart('registry client', () => import('./undici-api.js'));
  return loading;
}
