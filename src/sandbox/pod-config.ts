/**
 * Checking a RunPodSandbox config before anything is created, and deriving what the run needs from it:
 * the unique name, hostname, cgroup parent, namespace modes and the CNI inputs. Every error is
 * INVALID_ARGUMENT naming the CRI field (`config.metadata.name`, `config.linux.sysctls`, …).
 */
import { hostname as nodeHostname } from 'node:os';
import { isAbsolute } from 'node:path';
import { NamespaceMode, Protocol, type PodSandboxConfig, type PortMapping as CriPortMapping } from '../gen/runtime/v1/api.js';
import { invalidArgument } from '../common/errors.js';
import type { PortMapping } from '../network/cni-args.js';
import { cgroupsPathFor, pauseSysctls, type CgroupDriverName } from '../oci/index.js';
import { pauseUser, podNamespaceModes, type PodNamespaceModes } from '../oci/index.js';
import { sandboxName } from './model.js';

/** What a valid config yields. */
export interface PodPlan {
  name: string;
  hostname: string;
  cgroupParent: string;
  modes: PodNamespaceModes;
  portMappings: PortMapping[];
}

/** Config values that come from Stove's configuration. */
export interface PodDefaults {
  cgroupParent: string;
  cgroupDriver: CgroupDriverName;
}

/** Longest hostname the kernel takes (HOST_NAME_MAX). */
const HOSTNAME_MAX = 64;

/** Checks the config; throws INVALID_ARGUMENT naming the first bad field. */
export function planPod(config: PodSandboxConfig, defaults: PodDefaults): PodPlan {
  const meta = config.metadata;
  if (!meta) throw invalidArgument('config.metadata is required');
  for (const field of ['name', 'uid', 'namespace'] as const) {
    if (!meta[field]) throw invalidArgument(`config.metadata.${field} is required`);
  }
  if (meta.attempt < 0) throw invalidArgument(`config.metadata.attempt ${meta.attempt} must not be negative`);
  if (config.logDirectory && !isAbsolute(config.logDirectory)) {
    throw invalidArgument(`config.log_directory "${config.logDirectory}" must be an absolute path`);
  }
  const hostname = config.hostname || nodeHostname();
  if (hostname.length > HOSTNAME_MAX || /[\s/\0]/.test(hostname)) throw invalidArgument(`config.hostname "${config.hostname}" is not a valid hostname`);

  const sc = config.linux?.securityContext;
  const ns = sc?.namespaceOptions;
  if (ns?.pid === NamespaceMode.TARGET) throw invalidArgument('config.linux.security_context.namespace_options.pid TARGET is only valid for containers');
  const modes = podNamespaceModes(ns);
  // Both throw INVALID_ARGUMENT for unsafe sysctls and bad users; run them now so nothing is created first.
  pauseSysctls(config, modes);
  pauseUser(config);

  const cgroupParent = config.linux?.cgroupParent || defaults.cgroupParent;
  try {
    cgroupsPathFor(cgroupParent, 'check', defaults.cgroupDriver);
  } catch (err) {
    throw invalidArgument(`config.linux.cgroup_parent: ${(err as Error).message}`);
  }
  return {
    name: sandboxName(meta),
    hostname,
    cgroupParent,
    modes,
    portMappings: modes.hostNetwork ? [] : portMappings(config.portMappings),
  };
}

const PROTOCOLS: Record<number, string> = { [Protocol.TCP]: 'tcp', [Protocol.UDP]: 'udp', [Protocol.SCTP]: 'sctp' };

/** CRI port mappings as CNI's portMappings capability; a mapping without a host port publishes nothing. */
export function portMappings(mappings: readonly CriPortMapping[]): PortMapping[] {
  const out: PortMapping[] = [];
  mappings.forEach((m, i) => {
    const field = `config.port_mappings[${i}]`;
    const protocol = PROTOCOLS[m.protocol];
    if (!protocol) throw invalidArgument(`${field}.protocol ${m.protocol} is not TCP, UDP or SCTP`);
    if (m.hostPort <= 0) return;
    if (m.hostPort > 65535) throw invalidArgument(`${field}.host_port ${m.hostPort} is out of range`);
    if (m.containerPort <= 0 || m.containerPort > 65535) throw invalidArgument(`${field}.container_port ${m.containerPort} is out of range`);
    out.push({ hostPort: m.hostPort, containerPort: m.containerPort, protocol, ...(m.hostIp ? { hostIp: m.hostIp } : {}) });
  });
  return out;
}
