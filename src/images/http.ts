/**
 * undici, the registry client's HTTP stack, loaded on the first registry request: a node that does
 * not pull does not pay for it (several MiB of the idle daemon's resident set).
 */
type UndiciApi = typeof import('./undici-api.js');

let loading: Promise<UndiciApi> | undefined;

export function undici(): Promise<UndiciApi> {
  loading ??= import('./undici-api.js');
  return loading;
}
