/**
 * CNI spec versions and result shapes. A plugin answers ADD with a result in its config's cniVersion:
 * 0.1.0/0.2.0 use `ip4`/`ip6`, 0.3.x/0.4.0 a rich result whose `ips` carry a `version`, and 1.0.0+
 * the same without `version`. Stove converts results so every plugin of a list (and every cached
 * result handed to DEL/CHECK) sees the list's own version, as libcni's GetAsVersion does.
 */
import { internal } from '../common/errors.js';

/** The newest spec version Stove speaks (ADD/DEL/CHECK/VERSION; STATUS and GC are not used). */
export const MAX_SUPPORTED_VERSION = '1.1.0';

export interface CniInterface {
  name: string;
  mac?: string;
  sandbox?: string;
  [key: string]: unknown;
}

export interface CniIpConfig {
  /** "4" or "6"; present in 0.3.x/0.4.0 results only. */
  version?: string;
  /** CIDR notation, e.g. "10.88.0.5/16". */
  address: string;
  gateway?: string;
  /** Index into `interfaces`. */
  interface?: number;
  [key: string]: unknown;
}

export interface CniRoute {
  dst: string;
  gw?: string;
  [key: string]: unknown;
}

export interface CniDns {
  nameservers?: string[];
  domain?: string;
  search?: string[];
  options?: string[];
}

/** A result in the 0.3.0+ shape. */
export interface CniResult {
  cniVersion: string;
  interfaces?: CniInterface[];
  ips?: CniIpConfig[];
  routes?: CniRoute[];
  dns?: CniDns;
  [key: string]: unknown;
}

interface LegacyIp {
  ip: string;
  gateway?: string;
  routes?: CniRoute[];
}

const VERSION = /^(\d+)\.(\d+)\.(\d+)$/;

/** True for a plain `major.minor.patch` version string. */
export function isVersion(v: string): boolean {
  return VERSION.test(v);
}

/** Compares two versions numerically; an unparsable version sorts as 0.0.0. */
export function compareVersions(a: string, b: string): number {
  const pa = (VERSION.exec(a) ?? [, 0, 0, 0]).slice(1).map(Number);
  const pb = (VERSION.exec(b) ?? [, 0, 0, 0]).slice(1).map(Number);
  for (let i = 0; i < 3; i++) if (pa[i]! !== pb[i]!) return pa[i]! - pb[i]!;
  return 0;
}

/** True when `version` is at least `min`. */
export function versionAtLeast(version: string, min: string): boolean {
  return compareVersions(version, min) >= 0;
}

function ipVersionOf(address: string): '4' | '6' {
  return address.includes(':') ? '6' : '4';
}

/** Turns a 0.1.0/0.2.0 result (`ip4`, `ip6`) into the rich shape. */
function fromLegacy(raw: Record<string, unknown>): CniResult {
  const ips: CniIpConfig[] = [];
  const routes: CniRoute[] = [];
  for (const key of ['ip4', 'ip6'] as const) {
    const entry = raw[key] as LegacyIp | undefined;
    if (!entry?.ip) continue;
    ips.push({ address: entry.ip, ...(entry.gateway ? { gateway: entry.gateway } : {}) });
    routes.push(...(entry.routes ?? []));
  }
  const result: CniResult = { cniVersion: '0.3.1', ips };
  if (routes.length) result.routes = routes;
  if (raw.dns) result.dns = raw.dns as CniDns;
  return result;
}

/**
 * The result in `toVersion`'s shape. Results older than 0.3.0 are lifted; converting down to
 * 0.1.0/0.2.0 is not supported (those versions have no chaining), so the input comes back as is.
 */
export function convertResult(raw: unknown, toVersion: string): CniResult {
  if (typeof raw !== 'object' || raw === null) throw internal('result is not a JSON object');
  const input = raw as Record<string, unknown>;
  const from = typeof input.cniVersion === 'string' ? input.cniVersion : '0.1.0';
  if (!versionAtLeast(toVersion, '0.3.0')) return input as CniResult;
  const rich: CniResult = versionAtLeast(from, '0.3.0') ? { ...(input as CniResult) } : fromLegacy(input);
  const withVersion = !versionAtLeast(toVersion, '1.0.0');
  rich.ips = (rich.ips ?? []).map((ip) => {
    const { version: _drop, ...rest } = ip;
    return withVersion ? { version: ipVersionOf(ip.address), ...rest } : rest;
  });
  rich.cniVersion = toVersion;
  return rich;
}

/**
 * The pod's addresses (no prefix length) on interface `ifName`: the first IPv4 address first (the
 * primary IP, as containerd picks it), then the others in result order.
 */
export function podIps(result: CniResult, ifName: string): string[] {
  const interfaces = result.interfaces ?? [];
  const mine = (result.ips ?? []).filter((ip) => {
    if (ip.interface === undefined) return true;
    const iface = interfaces[ip.interface];
    return iface !== undefined && iface.name === ifName && !!iface.sandbox;
  });
  const addresses = mine.map((ip) => ip.address.split('/')[0]!).filter((a) => a !== '');
  const primary = addresses.findIndex((a) => !a.includes(':'));
  if (primary <= 0) return addresses;
  return [addresses[primary]!, ...addresses.filter((_a, i) => i !== primary)];
}
