/**
 * Finding the CNI network configuration, as ocicni and containerd do: the first file (sorted by name) in
 * the conf dir ending in .conflist, .conf or .json that parses into a usable network list. A single
 * plugin `.conf` becomes a one-plugin list.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

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
  const plugins = (isList ? data.plugins : [data]) as unknown[];
  if (typeof data.name !== 'string' || data.name === '') return `${source}: missing network "name"`;
  if (plugins.length === 0) return `${source}: "plugins" is empty`;
  for (const [i, p] of plugins.entries()) {
    if (typeof p !== 'object' || p === null || typeof (p as CniPluginConf).type !== 'string' || !(p as CniPluginConf).type)
      return `${source}: plugin ${i} has no "type"`;
  }
  const cniVersion = typeof data.cniVersion === 'string' && data.cniVersion ? data.cniVersion : '0.4.0';
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

/** Loads the first valid network configuration from `confDir`. */
export async function findCniNetwork(confDir: string): Promise<CniConfigLookup> {
  let names: string[];
  try {
    names = (await readdir(confDir)).filter((n) => EXTENSIONS.some((e) => n.endsWith(e))).sort();
  } catch (err) {
    return { network: undefined, reason: `cni config uninitialized: cannot read ${confDir}: ${(err as NodeJS.ErrnoException).code}` };
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
