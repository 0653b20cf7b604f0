/**
 * Devices in a container: device nodes (`linux.devices`) plus device-cgroup rules allowing them
 * (`linux.resources.devices`). The default rule denies everything; runc itself adds null, zero, full,
 * random, urandom, tty and the pts devices. Resolving host paths to major/minor is I/O and lives in
 * host-devices.ts (`resolveDevices`, `listHostDevices`).
 */
import { invalidArgument } from '../common/errors.js';
import { linuxOf, resourcesOf, type SpecOpt } from './opts.js';

/** A host device node, stat'ed, with where it appears in the container. */
export interface ResolvedDevice {
  /** Path inside the container. */
  containerPath: string;
  /** Host path (symlinks resolved), for messages. */
  hostPath: string;
  /** `c` or `b` (`p` for FIFOs). */
  type: 'c' | 'b' | 'p';
  major: number;
  minor: number;
  /** Permission bits of the host node. */
  fileMode: number;
  uid: number;
  gid: number;
  /** cgroup access: a combination of r, w, m. */
  permissions: string;
}

/** Validates CRI device permissions (`rwm` subset); empty means `rwm`. */
export function devicePermissions(value: string, hostPath: string): string {
  const p = value || 'rwm';
  if (!/^[rwm]{1,3}$/.test(p) || new Set(p).size !== p.length) {
    throw invalidArgument(`devices: invalid permissions "${value}" for "${hostPath}": want a combination of r, w and m`);
  }
  return p;
}

/** Adds device nodes and cgroup rules allowing them. */
export const withDevices = (devices: readonly ResolvedDevice[]): SpecOpt => (spec) => {
  if (!devices.length) return;
  const linux = linuxOf(spec);
  const nodes = linux.devices ?? [];
  const rules = resourcesOf(spec).devices ?? [];
  for (const d of devices) {
    const i = nodes.findIndex((n) => n.path === d.containerPath);
    const node = { path: d.containerPath, type: d.type, major: d.major, minor: d.minor, fileMode: d.fileMode, uid: d.uid, gid: d.gid };
    if (i >= 0) nodes[i] = node;
    else nodes.push(node);
    rules.push({ allow: true, type: d.type, major: d.major, minor: d.minor, access: d.permissions });
  }
  linux.devices = nodes;
  resourcesOf(spec).devices = rules;
};

/**
 * `runtime.device_ownership_from_security_context`: the container's CRI devices owned by its
 * runAsUser and runAsGroup instead of the host node's owner and group, each only where it is set and
 * not 0 (containerd `WithDevices`, CRI-O `specAddContainerConfigDevices`). A privileged container's host
 * devices and CDI devices keep theirs, as in both peers.
 */
export function devicesOwnedByRunAs(devices: readonly ResolvedDevice[], runAsUser: bigint | undefined, runAsGroup: bigint | undefined): ResolvedDevice[] {
  const id = (v: bigint | undefined) => (v !== undefined && v > 0n && v <= 0xffffffffn ? Number(v) : undefined);
  const uid = id(runAsUser);
  const gid = id(runAsGroup);
  if (uid === undefined && gid === undefined) return [...devices];
  return devices.map((d) => ({ ...d, ...(uid !== undefined ? { uid } : {}), ...(gid !== undefined ? { gid } : {}) }));
}

/** Privileged: every device allowed by the cgroup (containerd `WithAllDevicesAllowed`). */
export const withAllDevicesAllowed: SpecOpt = (spec) => {
  resourcesOf(spec).devices = [{ allow: true, access: 'rwm' }];
};
