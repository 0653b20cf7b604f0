/**
 * Loading the configuration: defaults, then the TOML file, then command-line flags. Unknown keys and
 * values of the wrong type are errors that name the key and the file.
 */
import { readFile } from 'node:fs/promises';
import { parse as parseToml, stringify as stringifyToml } from 'smol-toml';
import { LOG_LEVELS, type LogLevel } from '../common/logger.js';
import {
  defaultConfig,
  defaultRegistryConfig,
  DEFAULT_CONFIG_PATH,
  type Config,
  type RegistryConfig,
} from './schema.js';

/** A configuration problem a person can fix: names the file and the key. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** Flags that override the file (the `stove serve` options). */
export interface ConfigOverrides {
  socket?: string;
  root?: string;
  state?: string;
  logLevel?: string;
}

type Table = Record<string, unknown>;

/** Integer keys where -1 means "no limit". */
const UNLIMITED_WITH_MINUS_ONE = new Set(['runtime.log_size_max']);

const camel = (key: string) => key.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());
const snake = (key: string) => key.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase());

function isTable(v: unknown): v is Table {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Date);
}

/**
 * Copies `input` over `target`, key by key, requiring each key to exist in target with a value of the
 * same type. `dynamic` lists paths whose keys are free (maps such as registries).
 */
function merge(target: Table, input: Table, path: string, source: string): void {
  for (const [rawKey, value] of Object.entries(input)) {
    const key = camel(rawKey);
    const keyPath = path ? `${path}.${rawKey}` : rawKey;
    if (path === 'registries') {
      if (!isTable(value)) throw new ConfigError(`${source}: registries."${rawKey}" must be a table`);
      const reg = defaultRegistryConfig();
      merge(reg as unknown as Table, value, keyPath, source);
      (target as Record<string, RegistryConfig>)[rawKey] = reg;
      continue;
    }
    if (path === 'runtime.handlers') {
      if (!isTable(value)) throw new ConfigError(`${source}: runtime.handlers."${rawKey}" must be a table`);
      const handler = { path: '', root: `/run/stove/runtime-${rawKey}` };
      merge(handler as unknown as Table, value, keyPath, source);
      if (!handler.path) throw new ConfigError(`${source}: runtime.handlers."${rawKey}".path is required`);
      target[rawKey] = handler;
      continue;
    }
    if (!(key in target)) throw new ConfigError(`${source}: unknown key "${keyPath}"`);
    const current = target[key];
    if (isTable(current)) {
      if (!isTable(value)) throw new ConfigError(`${source}: "${keyPath}" must be a table`);
      merge(current, value, keyPath, source);
    } else if (Array.isArray(current)) {
      if (!Array.isArray(value) || !value.every((v) => typeof v === 'string'))
        throw new ConfigError(`${source}: "${keyPath}" must be a list of strings`);
      target[key] = value;
    } else if (typeof current === 'number') {
      const n = typeof value === 'bigint' ? Number(value) : value;
      if (typeof n !== 'number' || !Number.isInteger(n) || (n < 0 && !(n === -1 && UNLIMITED_WITH_MINUS_ONE.has(keyPath))))
        throw new ConfigError(`${source}: "${keyPath}" must be a non-negative integer, got ${JSON.stringify(String(value))}`);
      target[key] = n;
    } else if (typeof current !== typeof value) {
      throw new ConfigError(`${source}: "${keyPath}" must be a ${typeof current}, got ${typeof value}`);
    } else {
      target[key] = value;
    }
  }
}

/** Checks values that have a fixed set of choices or a required form. */
function validate(config: Config, source: string): void {
  if (!LOG_LEVELS.includes(config.logLevel))
    throw new ConfigError(`${source}: "log_level" must be one of ${LOG_LEVELS.join(', ')}, got "${config.logLevel}"`);
  if (config.runtime.cgroupDriver !== 'cgroupfs' && config.runtime.cgroupDriver !== 'systemd')
    throw new ConfigError(`${source}: "runtime.cgroup_driver" must be "cgroupfs" or "systemd", got "${config.runtime.cgroupDriver}"`);
  for (const key of ['socket', 'root', 'state'] as const) {
    if (!config[key].startsWith('/')) throw new ConfigError(`${source}: "${key}" must be an absolute path, got "${config[key]}"`);
  }
  if (config.streaming.port > 65535) throw new ConfigError(`${source}: "streaming.port" must be at most 65535`);
  for (const [host, reg] of Object.entries(config.registries)) {
    for (const mirror of reg.mirrors) {
      if (!/^https?:\/\/[^/]+/.test(mirror))
        throw new ConfigError(`${source}: registries."${host}".mirrors: "${mirror}" must be an http:// or https:// URL`);
    }
  }
  // conmon needs room for at least one line's worth of log between truncations (CRI-O's minimum).
  if (config.runtime.logSizeMax !== -1 && config.runtime.logSizeMax < 8192)
    throw new ConfigError(`${source}: "runtime.log_size_max" must be -1 (unlimited) or at least 8192 bytes, got ${config.runtime.logSizeMax}`);
  if (config.images.maxConcurrentDownloads < 1)
    throw new ConfigError(`${source}: "images.max_concurrent_downloads" must be at least 1`);
  for (const dir of config.images.certsDirs)
    if (!dir.startsWith('/')) throw new ConfigError(`${source}: "images.certs_dirs": "${dir}" must be an absolute path`);
  for (const key of ['signaturePolicy', 'signaturePolicyDir'] as const) {
    const value = config.images[key];
    if (value && !value.startsWith('/')) throw new ConfigError(`${source}: "images.${snake(key)}" must be an absolute path, got "${value}"`);
  }
}

/** Parses TOML text into a Config over the defaults. */
export function parseConfig(text: string, source: string): Config {
  let data: Table;
  try {
    data = parseToml(text, { integersAsBigInt: 'asNeeded' }) as Table;
  } catch (err) {
    throw new ConfigError(`${source}: invalid TOML: ${(err as Error).message.split('\n')[0]}`);
  }
  const config = defaultConfig();
  merge(config as unknown as Table, data, '', source);
  validate(config, source);
  return config;
}

/**
 * Loads the effective configuration. A missing file at the default path means "defaults"; a missing
 * file that was asked for by name is an error.
 */
export async function loadConfig(path: string | undefined, overrides: ConfigOverrides = {}): Promise<Config> {
  const file = path ?? DEFAULT_CONFIG_PATH;
  let config: Config;
  try {
    config = parseConfig(await readFile(file, 'utf8'), file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    if (path !== undefined) throw new ConfigError(`${file}: config file not found`);
    config = defaultConfig();
  }
  applyOverrides(config, overrides);
  return config;
}

/** Applies command-line flags over a loaded config and validates the result. */
export function applyOverrides(config: Config, overrides: ConfigOverrides): void {
  if (overrides.socket !== undefined) config.socket = overrides.socket;
  if (overrides.root !== undefined) config.root = overrides.root;
  if (overrides.state !== undefined) config.state = overrides.state;
  if (overrides.logLevel !== undefined) config.logLevel = overrides.logLevel as LogLevel;
  validate(config, 'command line');
}

/** The effective configuration as TOML, with snake_case keys (what `stove config` prints). */
export function configToToml(config: Config): string {
  const toSnake = (value: unknown, path: string): unknown => {
    if (!isTable(value)) return value;
    const out: Table = {};
    for (const [k, v] of Object.entries(value)) {
      const free = path === 'registries' || path === 'runtime.handlers';
      out[free ? k : snake(k)] = toSnake(v, path ? `${path}.${k}` : k);
    }
    return out;
  };
  return stringifyToml(toSnake(config, '') as Table) + '\n';
}
