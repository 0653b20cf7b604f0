/**
 * Loading the configuration: defaults, then the main TOML file, then every `*.toml` drop-in of the
 * config dir in lexical order (tables merge key by key, a later value wins, arrays are replaced), then
 * command-line flags. Unknown keys and values of the wrong type are errors that name the key and the file.
 */
import { readdir, readFile } from 'node:fs/promises';
import { isAbsolute, join, resolve } from 'node:path';
import { parse as parseToml, stringify as stringifyToml } from 'smol-toml';
import { LOG_LEVELS, type LogLevel } from '../common/logger.js';
import { parseUlimits } from './ulimits.js';
import {
  defaultConfig,
  durationMs,
  defaultRegistryConfig,
  DEFAULT_CONFIG_DIR,
  DEFAULT_CONFIG_PATH,
  IMAGE_VOLUMES_MODES,
  type Config,
  type RegistryConfig,
  type RuntimeHandlerConfig,
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
  metricsAddress?: string;
}

/** Number keys that take fractions; every other number is a non-negative integer. */
const FRACTION_KEYS = new Set(['tracing.sample_ratio']);

type Table = Record<string, unknown>;

/** Integer keys where -1 means "no limit". */
const UNLIMITED_WITH_MINUS_ONE = new Set(['runtime.log_size_max', 'runtime.pids_limit']);

const camel = (key: string) => key.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());
const snake = (key: string) => key.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase());

function isTable(v: unknown): v is Table {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Date);
}

/** Where each value came from: dotted snake_case key → file (or `command line`). */
export type ConfigOrigins = Map<string, string>;

/**
 * Copies `input` over `target`, key by key, requiring each key to exist in target with a value of the
 * same type. The keys of `registries` and `runtime.handlers` are free (maps by host or handler name);
 * an entry set again by a later file merges over the earlier one.
 */
function merge(target: Table, input: Table, path: string, source: string, origins?: ConfigOrigins): void {
  for (const [rawKey, value] of Object.entries(input)) {
    const key = camel(rawKey);
    const keyPath = path ? `${path}.${rawKey}` : rawKey;
    if (path === 'registries') {
      if (!isTable(value)) throw new ConfigError(`${source}: registries."${rawKey}" must be a table`);
      const reg = (target as Record<string, RegistryConfig>)[rawKey] ?? defaultRegistryConfig();
      merge(reg as unknown as Table, value, keyPath, source, origins);
      (target as Record<string, RegistryConfig>)[rawKey] = reg;
      continue;
    }
    if (path === 'runtime.handlers') {
      if (!isTable(value)) throw new ConfigError(`${source}: runtime.handlers."${rawKey}" must be a table`);
      const handler = (target[rawKey] as RuntimeHandlerConfig | undefined) ?? { path: '', root: `/run/stove/runtime-${rawKey}`, imageStore: '' };
      merge(handler as unknown as Table, value, keyPath, source, origins);
      if (!handler.path) throw new ConfigError(`${source}: runtime.handlers."${rawKey}".path is required`);
      target[rawKey] = handler;
      continue;
    }
    if (!(key in target)) throw new ConfigError(`${source}: unknown key "${keyPath}"`);
    const current = target[key];
    if (isTable(current)) {
      if (!isTable(value)) throw new ConfigError(`${source}: "${keyPath}" must be a table`);
      merge(current, value, keyPath, source, origins);
      continue;
    }
    origins?.set(keyPath, source);
    if (Array.isArray(current)) {
      if (!Array.isArray(value) || !value.every((v) => typeof v === 'string'))
        throw new ConfigError(`${source}: "${keyPath}" must be a list of strings`);
      target[key] = value;
    } else if (typeof current === 'number' && FRACTION_KEYS.has(keyPath)) {
      const n = typeof value === 'bigint' ? Number(value) : value;
      if (typeof n !== 'number' || !Number.isFinite(n)) throw new ConfigError(`${source}: "${keyPath}" must be a number`);
      target[key] = n;
    } else if (typeof current === 'number') {
      const n = typeof value === 'bigint' ? Number(value) : value;
      if (typeof n !== 'number' || !Number.isSafeInteger(n) || (n < 0 && !(n === -1 && UNLIMITED_WITH_MINUS_ONE.has(keyPath))))
        throw new ConfigError(`${source}: "${keyPath}" must be a non-negative integer${UNLIMITED_WITH_MINUS_ONE.has(keyPath) ? ' or -1 (unlimited)' : ''}, got ${JSON.stringify(String(value))}`);
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
    throw new ConfigError(`${source}: "runtime.cgroup_driver" must be "cgroupfs" or "systemd", got ${JSON.stringify(config.runtime.cgroupDriver)}`);
  if (!IMAGE_VOLUMES_MODES.includes(config.runtime.imageVolumes))
    throw new ConfigError(`${source}: "runtime.image_volumes" must be one of ${IMAGE_VOLUMES_MODES.map((m) => `"${m}"`).join(', ')}, got ${JSON.stringify(config.runtime.imageVolumes)}`);
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
  // Written into Stove's profile text and matched against the kernel's list: a plain name only.
  if (!/^[A-Za-z0-9/_][A-Za-z0-9._\-/:+]{0,254}$/.test(config.runtime.apparmorDefaultProfile) || config.runtime.apparmorDefaultProfile.includes('//'))
    throw new ConfigError(`${source}: "runtime.apparmor_default_profile" must be "stove-default", "unconfined" or the name of a loaded AppArmor profile (letters, digits and ._-/:+), got ${JSON.stringify(config.runtime.apparmorDefaultProfile)}`);
  try {
    parseUlimits(config.runtime.defaultUlimits);
  } catch (err) {
    throw new ConfigError(`${source}: "runtime.default_ulimits": ${(err as Error).message}`);
  }
  for (const pattern of config.images.pinned) {
    if (!pattern || pattern.indexOf('*') !== -1 && pattern.indexOf('*') !== pattern.length - 1)
      throw new ConfigError(`${source}: "images.pinned": "${pattern}" must be a reference, or a prefix ending in a single "*"`);
  }
  for (const [key, dirs] of [['cdi.spec_dirs', config.cdi.specDirs], ['runtime.hooks_dirs', config.runtime.hooksDirs], ['runtime.checkpoint_dirs', config.runtime.checkpointDirs]] as const) {
    for (const dir of dirs) if (!dir.startsWith('/')) throw new ConfigError(`${source}: "${key}": "${dir}" must be an absolute path`);
  }
  if (config.images.maxConcurrentDownloads < 1)
    throw new ConfigError(`${source}: "images.max_concurrent_downloads" must be at least 1`);
  for (const dir of config.images.certsDirs)
    if (!dir.startsWith('/')) throw new ConfigError(`${source}: "images.certs_dirs": "${dir}" must be an absolute path`);
  for (const key of ['signaturePolicy', 'signaturePolicyDir'] as const) {
    const value = config.images[key];
    if (value && !value.startsWith('/')) throw new ConfigError(`${source}: "images.${snake(key)}" must be an absolute path, got "${value}"`);
  }
  validateWritableLayersDir(config, source);
  validateHandlerImageStores(config, source);
  for (const key of ['maxSessions', 'maxSessionsPerContainer', 'maxStreamsPerSession'] as const) {
    if (config.streaming[key] < 1) throw new ConfigError(`${source}: "streaming.${snake(key)}" must be at least 1`);
  }
  for (const key of ['maxLayerSize', 'maxImageSize'] as const) {
    if (config.images[key] < 1) throw new ConfigError(`${source}: "images.${snake(key)}" must be at least 1`);
  }
  for (const key of ['pluginRegistrationTimeout', 'pluginRequestTimeout'] as const) {
    if (durationMs(config.nri[key]) === undefined) {
      const name = key === 'pluginRequestTimeout' ? 'plugin_request_timeout' : 'plugin_registration_timeout';
      throw new ConfigError(`${source}: "nri.${name}" must be a positive duration such as "2s" or "500ms", got "${config.nri[key]}"`);
    }
  }
  for (const key of ['socketPath', 'pluginPath', 'pluginConfigPath'] as const) {
    if (!config.nri[key].startsWith('/')) throw new ConfigError(`${source}: "nri.${key.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase())}" must be an absolute path`);
  }
  const validator = config.nri.defaultValidator;
  for (const name of validator.requiredPlugins) {
    // A plugin registers as <name> with an index of two digits: the list names one of the two forms.
    if (!/^(\d{2}-)?[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(name))
      throw new ConfigError(`${source}: "nri.default_validator.required_plugins": ${JSON.stringify(name)} is not a plugin name (a name such as "device-injector", or "<idx>-<name>" such as "10-device-injector")`);
  }
  if (validator.tolerateMissingPluginsAnnotation && !/^[A-Za-z0-9][A-Za-z0-9._/-]{0,252}$/.test(validator.tolerateMissingPluginsAnnotation))
    throw new ConfigError(`${source}: "nri.default_validator.tolerate_missing_plugins_annotation" must be an annotation key such as "tolerate-missing-nri-plugins.noderesource.dev", got ${JSON.stringify(validator.tolerateMissingPluginsAnnotation)}`);
  validateObservability(config, source);
}

/** True when `a` is `b` or a directory below it (both absolute and normalised). */
function within(a: string, b: string): boolean {
  return a === b || a.startsWith(b.endsWith('/') ? b : b + '/');
}

/**
 * `images.writable_layers_dir`: absolute, and a tree of its own. Inside `root` or `state` its entries
 * would sit among Stove's records (whose start-up sweeps remove what they do not know); above them Stove
 * would close the parent of its own trees to everyone.
 */
function validateWritableLayersDir(config: Config, source: string): void {
  const dir = config.images.writableLayersDir;
  if (!dir) return;
  const key = '"images.writable_layers_dir"';
  if (!isAbsolute(dir)) throw new ConfigError(`${source}: ${key} must be an absolute path, got "${dir}"`);
  const wanted = resolve(dir);
  const images = join(resolve(config.root), 'images');
  if (wanted === images)
    throw new ConfigError(`${source}: ${key} is the image store (${images}): give the writable layers a directory of their own, or leave it empty to keep them with the images`);
  for (const other of ['root', 'state'] as const) {
    const tree = resolve(config[other]);
    if (within(wanted, tree) || within(tree, wanted))
      throw new ConfigError(`${source}: ${key} ("${dir}") must lie outside "${other}" (${tree}) and not contain it: mount the writable layers' filesystem elsewhere, e.g. /var/lib/stove-containers`);
  }
}

/** Dirs of `root` that Stove's own stores and records fill (a handler's image store may sit beside them). */
const ROOT_SUBDIRS = ['images', 'containers', 'sandboxes', 'cni', 'quarantine'];

/**
 * `runtime.handlers.<name>.image_store`: absolute, and a tree no other store or record shares: not the
 * shared image store, not one of root's own dirs, not `state`, not the writable layers dir, not another
 * handler's store (each separate store reports its images under its one handler).
 */
function validateHandlerImageStores(config: Config, source: string): void {
  const taken: { what: string; dir: string }[] = [
    { what: 'the shared image store', dir: join(resolve(config.root), 'images') },
    ...ROOT_SUBDIRS.filter((d) => d !== 'images').map((d) => ({ what: `Stove's ${d} dir`, dir: join(resolve(config.root), d) })),
    { what: '"state"', dir: resolve(config.state) },
  ];
  if (config.images.writableLayersDir) taken.push({ what: '"images.writable_layers_dir"', dir: resolve(config.images.writableLayersDir) });
  for (const [name, handler] of Object.entries(config.runtime.handlers)) {
    const dir = handler.imageStore;
    if (!dir) continue;
    const key = `"runtime.handlers.${name}.image_store"`;
    if (name === 'runc' || name === '')
      throw new ConfigError(`${source}: ${key}: the default handler uses the shared image store; give another handler a store of its own`);
    if (!isAbsolute(dir)) throw new ConfigError(`${source}: ${key} must be an absolute path, got "${dir}"`);
    const wanted = resolve(dir);
    const root = resolve(config.root);
    if (within(root, wanted)) throw new ConfigError(`${source}: ${key} ("${dir}") must not be "root" (${root}) or contain it`);
    for (const other of taken) {
      if (within(wanted, other.dir) || within(other.dir, wanted))
        throw new ConfigError(`${source}: ${key} ("${dir}") overlaps ${other.what} (${other.dir}): give the handler a directory of its own, e.g. ${join(root, `images-${name}`)}`);
    }
    taken.push({ what: `"runtime.handlers.${name}.image_store"`, dir: wanted });
  }
}

/** `host:port` or `[v6]:port` into its parts; undefined when it is neither. */
export function parseHostPort(address: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]\s/]+)):(\d{1,5})$/.exec(address);
  if (!m || Number(m[3]) > 65535) return undefined;
  return { host: m[1] ?? m[2]!, port: Number(m[3]) };
}

function validateObservability(config: Config, source: string): void {
  const { address } = config.metrics;
  if (address && !parseHostPort(address))
    throw new ConfigError(`${source}: "metrics.address" must be host:port (e.g. "127.0.0.1:9099"), got "${address}"`);
  const { endpoint, sampleRatio, serviceName } = config.tracing;
  if (endpoint && !/^https?:\/\/[^/]+/.test(endpoint))
    throw new ConfigError(`${source}: "tracing.endpoint" must be an http:// or https:// URL (e.g. "http://127.0.0.1:4318"), got "${endpoint}"`);
  if (sampleRatio < 0 || sampleRatio > 1) throw new ConfigError(`${source}: "tracing.sample_ratio" must be between 0 and 1, got ${sampleRatio}`);
  if (!serviceName) throw new ConfigError(`${source}: "tracing.service_name" must not be empty`);
}

function parseToTable(text: string, source: string): Table {
  try {
    return parseToml(text, { integersAsBigInt: 'asNeeded' }) as Table;
  } catch (err) {
    throw new ConfigError(`${source}: invalid TOML: ${(err as Error).message.split('\n')[0]}`);
  }
}

/** Parses TOML text into a Config over `base` (the defaults unless given). */
export function parseConfig(text: string, source: string, base: Config = defaultConfig(), origins?: ConfigOrigins): Config {
  const config = structuredClone(base);
  merge(config as unknown as Table, parseToTable(text, source), '', source, origins);
  validate(config, source);
  return config;
}

/** Where the configuration comes from: the main file, the drop-in dir, and the flags. */
export interface ConfigSources {
  /** Main file; undefined = the default path, which may be missing. */
  path?: string;
  /** Drop-in dir; undefined = the default dir, which may be missing. */
  dir?: string;
  overrides?: ConfigOverrides;
}

/** The effective configuration, the files it was read from, and where each value came from. */
export interface LoadedConfig {
  config: Config;
  files: string[];
  origins: ConfigOrigins;
}

/** `*.toml` in `dir`, in lexical order; a missing default dir has none. */
async function dropInFiles(dir: string, explicit: boolean): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if ((code === 'ENOENT' || code === 'ENOTDIR') && !explicit) return [];
    if (code === 'ENOENT') throw new ConfigError(`${dir}: config dir not found`);
    throw new ConfigError(`${dir}: cannot read config dir: ${(err as Error).message}`);
  }
  return names
    .filter((n) => n.endsWith('.toml') && !n.startsWith('.'))
    .sort()
    .map((n) => join(dir, n));
}

/**
 * Loads the effective configuration from every layer. A missing file at the default path means
 * "defaults"; a missing file or dir that was asked for by name is an error.
 */
export async function loadConfigLayers(sources: ConfigSources = {}): Promise<LoadedConfig> {
  const origins: ConfigOrigins = new Map();
  const files: string[] = [];
  let config = defaultConfig();
  const main = sources.path ?? DEFAULT_CONFIG_PATH;
  try {
    config = parseConfig(await readFile(main, 'utf8'), main, config, origins);
    files.push(main);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    if (sources.path !== undefined) throw new ConfigError(`${main}: config file not found`);
  }
  for (const file of await dropInFiles(sources.dir ?? DEFAULT_CONFIG_DIR, sources.dir !== undefined)) {
    config = parseConfig(await readFile(file, 'utf8'), file, config, origins);
    files.push(file);
  }
  applyOverrides(config, sources.overrides ?? {}, origins);
  return { config, files, origins };
}

/** Loads the effective configuration (see loadConfigLayers). */
export async function loadConfig(path: string | undefined, overrides: ConfigOverrides = {}, dir?: string): Promise<Config> {
  return (await loadConfigLayers({ path, dir, overrides })).config;
}

/** Applies command-line flags over a loaded config and validates the result. */
export function applyOverrides(config: Config, overrides: ConfigOverrides, origins?: ConfigOrigins): void {
  const set = (key: string, apply: () => void) => {
    apply();
    origins?.set(key, 'command line');
  };
  if (overrides.socket !== undefined) set('socket', () => (config.socket = overrides.socket!));
  if (overrides.root !== undefined) set('root', () => (config.root = overrides.root!));
  if (overrides.state !== undefined) set('state', () => (config.state = overrides.state!));
  if (overrides.logLevel !== undefined) set('log_level', () => (config.logLevel = overrides.logLevel as LogLevel));
  if (overrides.metricsAddress !== undefined) set('metrics.address', () => (config.metrics.address = overrides.metricsAddress!));
  validate(config, 'command line');
}

/** The effective configuration as TOML, with snake_case keys (what `stove config` prints). */
export function configToToml(config: Config): string {
  const toSnake = (value: unknown, path: string): unknown => {
    // Registry credentials are never printed; a set one shows as "<redacted>".
    if (!isTable(value)) return SECRET_KEY.test(path) && value ? '<redacted>' : value;
    const out: Table = {};
    for (const [k, v] of Object.entries(value)) {
      const free = path === 'registries' || path === 'runtime.handlers';
      const key = free ? k : snake(k);
      out[key] = toSnake(v, path ? `${path}.${key}` : key);
    }
    return out;
  };
  return stringifyToml(toSnake(config, '') as Table) + '\n';
}

/**
 * One line per value, `key = value  # origin`, where origin is the file (or `command line`) that set
 * it last, or `default` (what `stove config --origin` prints).
 */
export function configOriginLines(loaded: LoadedConfig): string {
  const lines: string[] = [];
  const walk = (value: unknown, path: string) => {
    if (isTable(value)) {
      const free = path === 'registries' || path === 'runtime.handlers';
      for (const [k, v] of Object.entries(value)) walk(v, path ? `${path}.${free ? k : snake(k)}` : snake(k));
      return;
    }
    const shown = SECRET_KEY.test(path) && value ? '"<redacted>"' : stringifyValue(value);
    lines.push(`${path} = ${shown}  # ${loaded.origins.get(path) ?? 'default'}`);
  };
  walk(loaded.config, '');
  return lines.join('\n') + '\n';
}

/** Registry credentials: never printed. */
const SECRET_KEY = /^registries\..*\.(password|auth|identity_token)$/;

/** The configuration with every registry credential that is set shown as "<redacted>" (for verbose output). */
export function redactedConfig(config: Config): Config {
  const registries = Object.fromEntries(
    Object.entries(config.registries).map(([host, r]) => {
      const hide = (v: string) => (v ? '<redacted>' : v);
      return [host, { ...r, password: hide(r.password), auth: hide(r.auth), identityToken: hide(r.identityToken) }];
    }),
  );
  return { ...config, registries };
}

function stringifyValue(value: unknown): string {
  // The one-key TOML document `v = …` gives TOML's own spelling of the value.
  return stringifyToml({ v: value as never }).replace(/^v = /, '').trimEnd();
}
