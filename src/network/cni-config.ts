/**
 * Finding the CNI network configuration, as ocicni and containerd do: the first file (sorted by name) in
 * the conf dir ending in .conflist, .conf or .json that parses into a usable network list. A single
 * plugin `.conf` becomes a one-plugin list (libcni's ConfListFromConf).
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { compareVersions, isVersion, MAX_SUPPORTED_VERSION } from './cni-result.js';

/** One plugin entry of a network list: `type` names the binary, the rest is its configuration. */
export interface CniPluginConf {
  type: string;
  [key: string]: unknown;
}

/** A network configuration list (`.conflist`), the form every CNI call uses. */
export interface CniNetworkList {
  cniVersion: string;
  name: string;
  disableCheck?: boolean;
  plugins: CniPluginConf[];
  /** The file it came from. */
  source: string;
  /** The raw file bytes, for logging and `Status` verbose output. */
  raw: string;
}

const EXTENSIONS = ['.conflist', '.conf', '.json'];
/** libcni's rule for network names (they name iptables chains and host-local data dirs). */
const NETWORK_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

/** The version to use: `cniVersion`, or the highest supported entry of a CNI 1.1 `cniVersions` list. */
function pickVersion(data: Record<string, unknown>): string | undefined {
  if (Array.isArray(data.cniVersions)) {
    const usable = data.cniVersions
      .filter((v): v is string => typeof v === 'string' && isVersion(v) && compareVersions(v, MAX_SUPPORTED_VERSION) <= 0)
      .sort(compareVersions);
    if (usable.length) return usable[usable.length - 1];
  }
  if (typeof data.cniVersion === 'string' && data.cniVersion) return data.cniVersion;
  return undefined;
}

/** Parses one CNI config file; returns a reason string when it is unusable. */
export function parseCniConfig(text: string, source: string): CniNetworkList | string {
  let data: Record<string, unknown>;
  try {
    data = JSON.parse(text) as Record<string, unknown>;
  } catch (err) {
    return `${source}: invalid JSON: ${(err as Error).message}`;
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data)) return `${source}: not a JSON object`;
  const isList = Array.isArray(data.plugins);
  if (!isList && source.endsWith('.conflist')) return `${source}: a .conflist needs a "plugins" list`;
  const plugins = (isList ? data.plugins : [data]) as unknown[];
  if (typeof data.name !== 'string' || data.name === '') return `${source}: missing network "name"`;
  if (!NETWORK_NAME.test(data.name)) return `${source}: invalid network name ${JSON.stringify(data.name)}`;
  if (plugins.length === 0) return `${source}: "plugins" is empty`;
  for (const [i, p] of plugins.entries()) {
    if (typeof p !== 'object' || p === null || typeof (p as CniPluginConf).type !== 'string' || !(p as CniPluginConf).type)
      return `${source}: plugin ${i} has no "type"`;
    if ((p as CniPluginConf).type.includes('/')) return `${source}: plugin ${i} type ${JSON.stringify((p as CniPluginConf).type)} contains a "/"`;
  }
  // libcni defaults a missing version to 0.1.0 for single confs; lists in the wild omit it rarely.
  const cniVersion = pickVersion(data) ?? '0.4.0';
  if (!isVersion(cniVersion)) return `${source}: invalid cniVersion ${JSON.stringify(cniVersion)}`;
  return {
    cniVersion,
    name: data.name,
    disableCheck: data.disableCheck === true,
    plugins: plugins as CniPluginConf[],
    source,
    raw: text,
  };
}

/** Result of scanning the conf dir: the chosen network, or why there is none. */
export type CniConfigLookup = { network: CniNetworkList } | { network: undefined; reason: string };

async function candidates(confDir: string): Promise<string[]> {
  return (await readdir(confDir)).filter((n) => EXTENSIONS.some((e) => n.endsWith(e))).sort();
}

function unreadable(confDir: string, err: unknown): CniConfigLookup {
  return { network: undefined, reason: `cni config uninitialized: cannot read ${confDir}: ${(err as NodeJS.ErrnoException).code}` };
}

/** Loads the first valid network configuration from `confDir`. */
export async function findCniNetwork(confDir: string): Promise<CniConfigLookup> {
  let names: string[];
  try {
    names = await candidates(confDir);
  } catch (err) {
    return unreadable(confDir, err);
  }
  const problems: string[] = [];
  for (const name of names) {
    const path = join(confDir, name);
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (err) {
      problems.push(`${path}: ${(err as NodeJS.ErrnoException).code}`);
      continue;
    }
    const parsed = parseCniConfig(text, path);
    if (typeof parsed === 'string') problems.push(parsed);
    else return { network: parsed };
  }
  const reason = problems.length ? `cni config uninitialized: no valid config in ${confDir} (${problems.join('; ')})` : 'cni config uninitialized';
  return { network: undefined, reason };
}

/**
 * The conf dir's current network, re-parsed only when a candidate file changed (name, size, mtime,
 * inode). Status asks every few seconds, so the usual cost is one readdir and a stat per file.
 */
export class CniConfigSource {
  private cached?: { key: string; lookup: CniConfigLookup };

  constructor(readonly confDir: string) {}

  /** The network to use now, or why there is none. */
  async current(): Promise<CniConfigLookup> {
    let key: string;
    try {
      key = await this.fingerprint();
    } catch (err) {
      this.cached = undefined;
      return unreadable(this.confDir, err);
    }
    if (this.cached?.key === key) return this.cached.lookup;
    const lookup = await findCniNetwork(this.confDir);
    this.cached = { key, lookup };
    return lookup;
  }

  /** Forgets the cached network, so the next call reads the conf dir again whatever it looks like. */
  rescan(): void {
    this.cached = undefined;
  }

  private async fingerprint(): Promise<string> {
    const parts: string[] = [];
    for (const name of await candidates(this.confDir)) {
      const st = await stat(join(this.confDir, name)).catch(() => undefined);
      parts.push(st ? `${name}:${st.ino}:${st.size}:${st.mtimeMs}` : `${name}:-`);
    }
    return parts.join('/');
  }
}
