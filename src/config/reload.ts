/**
 * What a config reload (SIGHUP) may change while the daemon runs. Live keys apply to work that starts
 * after the reload (pulls, creates, new log files); running containers are never touched. Every other
 * key is read once at start: a change to one is logged as needing a restart and otherwise ignored.
 */
import type { Config } from './schema.js';

/** Dotted snake_case keys (or key prefixes ending in `.`) that a reload applies. */
export const LIVE_KEYS: readonly string[] = [
  'log_level',
  'registries.',
  'images.pinned',
  'images.certs_dirs',
  'images.signature_policy',
  'images.signature_policy_dir',
  'runtime.default_ulimits',
  'runtime.pids_limit',
  'runtime.allowed_annotations',
  'runtime.log_size_max',
  'runtime.image_volumes',
  'runtime.device_ownership_from_security_context',
  'metrics.',
  'tracing.',
];

const snake = (key: string) => key.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase());

function isTable(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Every leaf value of a config by dotted snake_case key (registry and handler names kept as written). */
function flatten(config: Config): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (value: unknown, path: string) => {
    if (isTable(value)) {
      const free = path === 'registries' || path === 'runtime.handlers';
      for (const [k, v] of Object.entries(value)) walk(v, path ? `${path}.${free ? k : snake(k)}` : snake(k));
      return;
    }
    out.set(path, JSON.stringify(value));
  };
  walk(config, '');
  return out;
}

/** Keys whose value differs between two configs (added and removed keys included), sorted. */
export function changedKeys(before: Config, after: Config): string[] {
  const a = flatten(before);
  const b = flatten(after);
  const keys = new Set([...a.keys(), ...b.keys()]);
  return [...keys].filter((k) => a.get(k) !== b.get(k)).sort();
}

export function isLiveKey(key: string): boolean {
  return LIVE_KEYS.some((live) => (live.endsWith('.') ? key.startsWith(live) : key === live));
}

/** The changes of a reload, split into what applies now and what waits for a restart. */
export function planReload(before: Config, after: Config): { live: string[]; restart: string[] } {
  const changed = changedKeys(before, after);
  return { live: changed.filter(isLiveKey), restart: changed.filter((k) => !isLiveKey(k)) };
}
