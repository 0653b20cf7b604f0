/**
 * Pod sysctls. Only namespaced sysctls may be set, since anything else would change the node (the
 * kubelet's `pkg/kubelet/sysctl` list): IPC ones (kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*)
 * unless the pod uses the host IPC namespace, and net.* unless it uses the host network.
 */
import { invalidArgument } from '../common/errors.js';
import { linuxOf, type SpecOpt } from './opts.js';

/**
 * `net/ipv4/ip_forward` → `net.ipv4.ip_forward`. As the kubelet does: when the first separator is a
 * slash, slashes and dots swap (so `net/ipv4/conf/eth0.100/rp_filter` keeps its dot in the device name).
 */
export function normalizeSysctlName(name: string): string {
  const slash = name.indexOf('/');
  const dot = name.indexOf('.');
  if (slash < 0 || (dot >= 0 && dot < slash)) return name;
  return name.replace(/[./]/g, (c) => (c === '/' ? '.' : '/'));
}

type SysctlNamespace = 'ipc' | 'net';

function namespaceOf(name: string): SysctlNamespace | undefined {
  if (name === 'kernel.sem' || name.startsWith('kernel.shm') || name.startsWith('kernel.msg') || name.startsWith('fs.mqueue.')) return 'ipc';
  if (name.startsWith('net.')) return 'net';
  return undefined;
}

const NAME = /^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$/;

/**
 * Checks and normalises a pod's sysctls. Errors are InvalidArgument and name the sysctl and the CRI
 * field (`linux.sysctls`).
 */
export function validateSysctls(sysctls: Record<string, string>, pod: { hostNetwork: boolean; hostIpc: boolean }): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [raw, value] of Object.entries(sysctls)) {
    const name = normalizeSysctlName(raw);
    if (!NAME.test(name)) throw invalidArgument(`linux.sysctls: invalid sysctl name "${raw}"`);
    const ns = namespaceOf(name);
    if (!ns) throw invalidArgument(`linux.sysctls: sysctl "${raw}" is not namespaced and cannot be set for a pod`);
    if (ns === 'net' && pod.hostNetwork) {
      throw invalidArgument(`linux.sysctls: sysctl "${raw}" would change the host's network namespace (the pod uses the host network)`);
    }
    if (ns === 'ipc' && pod.hostIpc) {
      throw invalidArgument(`linux.sysctls: sysctl "${raw}" would change the host's IPC namespace (the pod uses host IPC)`);
    }
    out[name] = value;
  }
  return out;
}

/** Sets `linux.sysctl` (removes it when empty). */
export const withSysctls = (sysctls: Record<string, string>): SpecOpt => (spec) => {
  const linux = linuxOf(spec);
  if (Object.keys(sysctls).length) linux.sysctl = { ...sysctls };
  else delete linux.sysctl;
};
