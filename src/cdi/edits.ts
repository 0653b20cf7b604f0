/**
 * Container edits: merging those of the requested devices and their specs, completing device nodes
 * from the host, and applying the result to an OCI spec in the order the CDI reference library does:
 * env, device nodes (with a device cgroup rule each), mounts (then sorted by depth), hooks, intelRdt,
 * additional GIDs. A later edit wins over an earlier one for the same variable, device path or mount
 * destination; each such clash is returned as a conflict so it can be reported.
 */
import { lstat } from 'node:fs/promises';
import { posix } from 'node:path';
import { splitDevT, type OciHook as Hook, type OciDevice as LinuxDevice, type OciMount as Mount, type Spec } from '../oci/index.js';
import type { CdiDeviceNode, ContainerEdits } from './spec-file.js';
import { failedPrecondition } from '../common/errors.js';

/** A device node with everything the OCI spec needs. */
export interface CompleteDeviceNode extends CdiDeviceNode {
  type: string;
  major: number;
  minor: number;
}

/** Edits ready to apply: device nodes completed from the host. */
export interface ResolvedEdits extends Omit<ContainerEdits, 'deviceNodes'> {
  deviceNodes: CompleteDeviceNode[];
}

/** Concatenates edits in order; the last intelRdt wins. */
export function mergeEdits(list: readonly ContainerEdits[]): ContainerEdits {
  const out: ContainerEdits = { env: [], deviceNodes: [], mounts: [], hooks: [], additionalGids: [], netDevices: [] };
  for (const e of list) {
    out.netDevices.push(...e.netDevices);
    out.env.push(...e.env);
    out.deviceNodes.push(...e.deviceNodes);
    out.mounts.push(...e.mounts);
    out.hooks.push(...e.hooks);
    out.additionalGids.push(...e.additionalGids);
    if (e.intelRdt) out.intelRdt = e.intelRdt;
  }
  return out;
}

/** What lstat tells about a host node: type, numbers and permission bits. */
export interface HostNode {
  type: 'b' | 'c' | 'p';
  major: number;
  minor: number;
  fileMode: number;
}

/** The node at `path` (not followed), or an Error saying why it is none. */
export async function hostNode(path: string): Promise<HostNode | Error> {
  let st;
  try {
    st = await lstat(path, { bigint: true });
  } catch (err) {
    return err as Error;
  }
  const type = st.isBlockDevice() ? 'b' : st.isCharacterDevice() ? 'c' : st.isFIFO() ? 'p' : undefined;
  if (!type) return new Error('not a device node');
  return { type, ...splitDevT(st.rdev), fileMode: Number(st.mode & 0o7777n) };
}

/**
 * Fills a node's missing type, major, minor and file mode from its host node (`hostPath`, else
 * `path`). A node that names its type and major (or is a FIFO) needs no host node; any other must
 * exist and be of the type it names.
 */
export function completeNode(node: CdiDeviceNode, host: HostNode | Error): CompleteDeviceNode {
  const hostPath = node.hostPath ?? node.path;
  const minimal = !!node.type && (!!node.major || node.type === 'p');
  if (host instanceof Error) {
    if (!minimal) throw failedPrecondition(`failed to stat CDI host device "${hostPath}": ${host.message}`);
    return { ...node, type: node.type!, major: node.major ?? 0, minor: node.minor ?? 0 };
  }
  const out = { ...node, fileMode: node.fileMode ?? host.fileMode };
  if (minimal) return { ...out, type: node.type!, major: node.major ?? 0, minor: node.minor ?? 0 };
  // "u" (unbuffered character device) is what a char node may be called.
  const type = node.type ?? host.type;
  if ((type === 'u' ? 'c' : type) !== host.type) {
    throw failedPrecondition(`CDI device ("${node.path}", "${hostPath}"): host type mismatch (${type}, ${host.type})`);
  }
  if (type === 'p') return { ...out, type, major: 0, minor: 0 };
  return node.major ? { ...out, type, major: node.major, minor: node.minor ?? 0 } : { ...out, type, major: host.major, minor: host.minor };
}

/** Completes every device node of `edits` from the host. */
export async function resolveEdits(edits: ContainerEdits, lookup: (path: string) => Promise<HostNode | Error> = hostNode): Promise<ResolvedEdits> {
  const hosts = await Promise.all(edits.deviceNodes.map((n) => lookup(n.hostPath ?? n.path)));
  return { ...edits, deviceNodes: edits.deviceNodes.map((n, i) => completeNode(n, hosts[i]!)) };
}

/** Applies resolved edits to `spec` in place; returns the clashes between edits and with the spec. */
export function applyEdits(spec: Spec, edits: ResolvedEdits): string[] {
  const conflicts: string[] = [];
  applyEnv(spec, edits.env, conflicts);
  applyDeviceNodes(spec, edits.deviceNodes, conflicts);
  applyMounts(spec, edits.mounts, conflicts);
  applyHooks(spec, edits.hooks);
  if (edits.intelRdt) {
    spec.linux ??= {};
    spec.linux.intelRdt = { ...edits.intelRdt };
  }
  for (const n of edits.netDevices) {
    const devices = ((spec.linux ??= {}).netDevices ??= {});
    const old = devices[n.hostInterfaceName];
    if (old && old.name !== n.name) conflicts.push(`net device ${n.hostInterfaceName}: "${old.name ?? ''}" replaced by "${n.name}"`);
    devices[n.hostInterfaceName] = { name: n.name };
  }
  const user = (spec.process ??= { user: { uid: 0, gid: 0 }, args: [], cwd: '/' }).user;
  for (const gid of edits.additionalGids) {
    if (gid === 0) continue; // the CDI spec ignores 0
    user.additionalGids ??= [];
    if (!user.additionalGids.includes(gid)) user.additionalGids.push(gid);
  }
  return conflicts;
}

/** Sets each variable, replacing one of the same name where it is. */
function applyEnv(spec: Spec, env: readonly string[], conflicts: string[]): void {
  if (!env.length) return;
  const process = (spec.process ??= { user: { uid: 0, gid: 0 }, args: [], cwd: '/' });
  const list = (process.env ??= []);
  const index = new Map(list.map((e, i) => [e.slice(0, e.indexOf('=')), i]));
  for (const e of env) {
    const key = e.slice(0, e.indexOf('='));
    const at = index.get(key);
    if (at === undefined) {
      index.set(key, list.push(e) - 1);
      continue;
    }
    if (list[at] !== e) conflicts.push(`env ${key}: "${list[at]}" replaced by "${e}"`);
    list[at] = e;
  }
}

/**
 * Adds each node (replacing one at the same path) and, for block and character devices, a cgroup
 * rule allowing it. Without its own uid/gid a node belongs to the process's user (when not root).
 */
function applyDeviceNodes(spec: Spec, nodes: readonly CompleteDeviceNode[], conflicts: string[]): void {
  if (!nodes.length) return;
  const linux = (spec.linux ??= {});
  const devices = (linux.devices ??= []);
  const rules = ((linux.resources ??= {}).devices ??= []);
  const user = spec.process?.user;
  for (const n of nodes) {
    const dev: LinuxDevice = { path: n.path, type: n.type, major: n.major, minor: n.minor };
    if (n.fileMode !== undefined) dev.fileMode = n.fileMode;
    const uid = n.uid ?? (user && user.uid > 0 ? user.uid : undefined);
    const gid = n.gid ?? (user && user.gid > 0 ? user.gid : undefined);
    if (uid !== undefined) dev.uid = uid;
    if (gid !== undefined) dev.gid = gid;
    const at = devices.findIndex((d) => d.path === n.path);
    if (at >= 0) {
      const old = devices[at]!;
      if (old.type !== dev.type || old.major !== dev.major || old.minor !== dev.minor) {
        conflicts.push(`device ${n.path}: ${old.type} ${old.major}:${old.minor} replaced by ${dev.type} ${dev.major}:${dev.minor}`);
      }
      devices.splice(at, 1);
    }
    devices.push(dev);
    if (n.type === 'b' || n.type === 'c') {
      const access = !n.permissions ? 'rwm' : n.permissions === 'none' ? '' : n.permissions;
      rules.push({ allow: true, type: n.type, major: n.major, minor: n.minor, access });
    }
  }
}

/** Adds each mount (replacing one at the same destination), then orders all by destination depth. */
function applyMounts(spec: Spec, mounts: ContainerEdits['mounts'], conflicts: string[]): void {
  if (!mounts.length) return;
  const list = (spec.mounts ??= []);
  for (const m of mounts) {
    const at = list.findIndex((x) => x.destination === m.containerPath);
    if (at >= 0) {
      if (list[at]!.source !== m.hostPath) conflicts.push(`mount ${m.containerPath}: "${list[at]!.source ?? ''}" replaced by "${m.hostPath}"`);
      list.splice(at, 1);
    }
    const mount: Mount = { destination: m.containerPath, source: m.hostPath };
    if (m.type) mount.type = m.type;
    if (m.options) mount.options = [...m.options];
    list.push(mount);
  }
  // Parents before children, otherwise in order (a stable sort, as Docker, CRI-O and CDI do).
  const depth = (m: Mount) => posix.normalize(m.destination).replace(/(.)\/+$/, '$1').split('/').length - 1;
  spec.mounts = list.map((m, i) => ({ m, i, d: depth(m) })).sort((a, b) => a.d - b.d || a.i - b.i).map((x) => x.m);
}

function applyHooks(spec: Spec, hooks: ContainerEdits['hooks']): void {
  for (const h of hooks) {
    const hook: Hook = { path: h.path };
    if (h.args) hook.args = [...h.args];
    if (h.env) hook.env = [...h.env];
    if (h.timeout !== undefined) hook.timeout = h.timeout;
    spec.hooks ??= {};
    (spec.hooks[h.hookName] ??= []).push(hook);
  }
}
