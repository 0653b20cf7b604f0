/**
 * What the runtime adds to a static CNI config for one pod: `CNI_ARGS` (the K8S_* identity, as
 * ocicni builds it), capability arguments (CONVENTIONS.md: portMappings, bandwidth, dns, pod
 * annotations, cgroupPath), and the per-plugin request config (name, cniVersion, prevResult and a
 * runtimeConfig holding only the capabilities that plugin declares).
 */
import { invalidArgument } from '../common/errors.js';
import type { CniNetworkList, CniPluginConf } from './cni-config.js';
import type { CniResult } from './cni-result.js';
import { versionAtLeast } from './cni-result.js';

/** A pod port to publish on the host (CRI PortMapping; protocol "tcp", "udp" or "sctp" in any case). */
export interface PortMapping {
  hostPort: number;
  containerPort: number;
  protocol: string;
  hostIp?: string;
}

/** The pod's DNS settings (CRI DNSConfig). */
export interface DnsConfig {
  servers?: string[];
  searches?: string[];
  options?: string[];
}

/** Who the pod is, for CNI_ARGS. */
export interface PodIdentity {
  sandboxId: string;
  podName: string;
  podNamespace: string;
  podUid: string;
}

/** Everything per-pod that goes into a CNI call besides the static config. */
export interface PodNetworkArgs extends PodIdentity {
  portMappings?: PortMapping[];
  annotations?: Record<string, string>;
  dnsConfig?: DnsConfig;
  /** The pod's cgroup parent, for plugins declaring the `cgroupPath` capability. */
  cgroupParent?: string;
}

export const INGRESS_BANDWIDTH_ANNOTATION = 'kubernetes.io/ingress-bandwidth';
export const EGRESS_BANDWIDTH_ANNOTATION = 'kubernetes.io/egress-bandwidth';
/** containerd and CRI-O hand the pod's annotations to plugins under this capability. */
export const POD_ANNOTATIONS_CAPABILITY = 'io.kubernetes.cri.pod-annotations';
/** Burst for shaped pods: "no limit", as ocicni sets it. */
const UNLIMITED_BURST = 2147483647;

/** CNI_ARGS pairs in ocicni's order; values may not contain the separators `;` and `=`. */
export function buildCniArgs(pod: PodIdentity): [string, string][] {
  const pairs: [string, string][] = [
    ['IgnoreUnknown', '1'],
    ['K8S_POD_NAMESPACE', pod.podNamespace],
    ['K8S_POD_NAME', pod.podName],
    ['K8S_POD_INFRA_CONTAINER_ID', pod.sandboxId],
    ['K8S_POD_UID', pod.podUid],
  ];
  for (const [key, value] of pairs) {
    if (/[;=]/.test(value)) throw invalidArgument(`${key} value ${JSON.stringify(value)} must not contain ";" or "="`);
  }
  return pairs;
}

/** The `CNI_ARGS` environment value. */
export function formatCniArgs(pairs: [string, string][]): string {
  return pairs.map(([k, v]) => `${k}=${v}`).join(';');
}

const DECIMAL_SUFFIX: Record<string, number> = { n: -9, u: -6, m: -3, '': 0, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };
const BINARY_SUFFIX: Record<string, bigint> = { Ki: 1n << 10n, Mi: 1n << 20n, Gi: 1n << 30n, Ti: 1n << 40n, Pi: 1n << 50n, Ei: 1n << 60n };
const QUANTITY = /^([+-]?)(\d*)(?:\.(\d*))?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$/;

/**
 * A Kubernetes resource quantity ("10M", "1.5Gi", "1e6") as an integer, rounded up like
 * Quantity.Value(). Exact decimal arithmetic, so "0.1k" is 100, not 100.00000000000001.
 */
export function parseQuantity(text: string): bigint {
  const m = QUANTITY.exec(text.trim());
  if (!m || (m[2] === '' && (m[3] ?? '') === '')) throw new Error(`quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'`);
  const [, sign, whole, frac = '', suffix = ''] = m;
  let numerator = BigInt((whole || '0') + frac);
  let denominator = 10n ** BigInt(frac.length);
  if (suffix in BINARY_SUFFIX) numerator *= BINARY_SUFFIX[suffix]!;
  else {
    const exp = suffix in DECIMAL_SUFFIX ? DECIMAL_SUFFIX[suffix]! : Number(suffix.slice(1));
    if (exp >= 0) numerator *= 10n ** BigInt(exp);
    else denominator *= 10n ** BigInt(-exp);
  }
  const magnitude = (numerator + denominator - 1n) / denominator;
  return sign === '-' ? -magnitude : magnitude;
}

/** One bandwidth annotation in bits per second, checked as the kubelet does (1k to 1P). */
function bandwidthFrom(annotations: Record<string, string>, key: string): number | undefined {
  const text = annotations[key];
  if (text === undefined) return undefined;
  let bits: bigint;
  try {
    bits = parseQuantity(text);
  } catch (err) {
    throw invalidArgument(`annotation ${key}=${JSON.stringify(text)}: ${(err as Error).message}`);
  }
  if (bits < 1000n) throw invalidArgument(`annotation ${key}=${JSON.stringify(text)}: resource is unreasonably small (< 1kbit)`);
  if (bits > 10n ** 15n) throw invalidArgument(`annotation ${key}=${JSON.stringify(text)}: resource is unreasonably large (> 1Pbit)`);
  return Number(bits);
}

/** The `bandwidth` capability argument from the pod's annotations, or undefined when unshaped. */
export function bandwidthFromAnnotations(annotations: Record<string, string>): Record<string, number> | undefined {
  const ingress = bandwidthFrom(annotations, INGRESS_BANDWIDTH_ANNOTATION);
  const egress = bandwidthFrom(annotations, EGRESS_BANDWIDTH_ANNOTATION);
  if (ingress === undefined && egress === undefined) return undefined;
  const bw: Record<string, number> = {};
  if (ingress !== undefined) Object.assign(bw, { ingressRate: ingress, ingressBurst: UNLIMITED_BURST });
  if (egress !== undefined) Object.assign(bw, { egressRate: egress, egressBurst: UNLIMITED_BURST });
  return bw;
}

/** The CNI `portMappings` entries; mappings without a host port are not published (as containerd does). */
export function cniPortMappings(mappings: PortMapping[]): Record<string, unknown>[] {
  return mappings
    .filter((p) => p.hostPort > 0)
    .map((p) => ({
      hostPort: p.hostPort,
      containerPort: p.containerPort,
      protocol: (p.protocol || 'tcp').toLowerCase(),
      ...(p.hostIp ? { hostIP: p.hostIp } : {}),
    }));
}

/** Every capability argument this pod supplies; each plugin later gets only those it declares. */
export function buildCapabilityArgs(args: PodNetworkArgs): Record<string, unknown> {
  const caps: Record<string, unknown> = {};
  const ports = cniPortMappings(args.portMappings ?? []);
  if (ports.length) caps.portMappings = ports;
  const bandwidth = bandwidthFromAnnotations(args.annotations ?? {});
  if (bandwidth) caps.bandwidth = bandwidth;
  const dns = args.dnsConfig;
  if (dns && (dns.servers?.length || dns.searches?.length || dns.options?.length)) {
    caps.dns = { servers: dns.servers ?? [], searches: dns.searches ?? [], options: dns.options ?? [] };
  }
  caps[POD_ANNOTATIONS_CAPABILITY] = { ...(args.annotations ?? {}) };
  if (args.cgroupParent) caps.cgroupPath = args.cgroupParent;
  return caps;
}

/** The capability arguments a plugin asked for with `"capabilities": {"<name>": true}`. */
export function runtimeConfigFor(plugin: CniPluginConf, capabilityArgs: Record<string, unknown>): Record<string, unknown> {
  const declared = (plugin.capabilities ?? {}) as Record<string, unknown>;
  const rc: Record<string, unknown> = {};
  for (const [name, enabled] of Object.entries(declared)) {
    if (enabled === true && name in capabilityArgs) rc[name] = capabilityArgs[name];
  }
  return rc;
}

/**
 * The JSON a plugin reads on stdin: its own config plus the list's name and cniVersion, the previous
 * result (chaining exists from 0.3.0), and its runtimeConfig. `capabilities` stays, as libcni leaves it.
 */
export function pluginRequestConfig(
  list: Pick<CniNetworkList, 'name' | 'cniVersion'>,
  plugin: CniPluginConf,
  capabilityArgs: Record<string, unknown>,
  prevResult?: CniResult,
): Record<string, unknown> {
  const config: Record<string, unknown> = { ...plugin, name: list.name, cniVersion: list.cniVersion };
  if (prevResult && versionAtLeast(list.cniVersion, '0.3.0')) config.prevResult = prevResult;
  else delete config.prevResult;
  const rc = runtimeConfigFor(plugin, capabilityArgs);
  if (Object.keys(rc).length) config.runtimeConfig = rc;
  return config;
}
