/**
 * One CDI spec file (JSON or YAML), parsed and checked as the CDI spec and its reference library do:
 * unknown fields are errors, `cdiVersion` must be a released version Stove reads (0.3.0 to 1.0.0) and
 * at least the version the fields in use need (table below), names follow the parser's character
 * rules, a spec has at least one device, device names are unique and each device has edits.
 *
 *   0.4.0  mounts[].type
 *   0.5.0  deviceNodes[].hostPath; device names starting with a digit
 *   0.6.0  annotations (spec or device); dots in the class of `kind`
 *   0.7.0  intelRdt; additionalGids
 *   0.8.0, 1.0.0  no new fields (library changes only)
 *   1.1.0  netDevices; intelRdt schemata and enableMonitoring (and intelRdt's enableCMT and enableMBM
 *          are gone: a 1.1.0 spec using them is refused)
 *
 * Whether the OCI runtime can do what a device's edits ask (netDevices, the 1.1.0 intelRdt fields) is
 * checked when the device is injected (registry.ts), not here: the file is valid either way.
 */
import { parse as parseYaml } from 'yaml';
import type { OciHookStage as HookStage, LinuxIntelRdt } from '../oci/index.js';
import { deviceNameProblem, splitKind, vendorOrClassProblem } from './names.js';

/** The versions Stove reads, oldest first. */
export const CDI_VERSIONS = ['0.3.0', '0.4.0', '0.5.0', '0.6.0', '0.7.0', '0.8.0', '1.0.0', '1.1.0'] as const;
export type CdiVersion = (typeof CDI_VERSIONS)[number];

/** Spec files larger than this are rejected unread (real ones are a few KiB). */
export const MAX_SPEC_BYTES = 4 << 20;

export interface CdiDeviceNode {
  /** In the container. */
  path: string;
  /** On the host; `path` when absent. */
  hostPath?: string;
  /** `b`, `c`, `u` or `p`; from the host node when absent. */
  type?: string;
  major?: number;
  minor?: number;
  fileMode?: number;
  /** cgroup access: a combination of r, w, m; `none` for no rule access; empty = `rwm`. */
  permissions?: string;
  uid?: number;
  gid?: number;
}

export interface CdiMount {
  hostPath: string;
  containerPath: string;
  options?: string[];
  type?: string;
}

/** A host network interface moved into the container (1.1.0). */
export interface CdiNetDevice {
  hostInterfaceName: string;
  /** Its name in the container. */
  name: string;
}

export interface CdiHook {
  hookName: HookStage;
  path: string;
  args?: string[];
  env?: string[];
  timeout?: number;
}

/** `containerEdits`, with absent lists as empty ones. */
export interface ContainerEdits {
  env: string[];
  deviceNodes: CdiDeviceNode[];
  mounts: CdiMount[];
  hooks: CdiHook[];
  additionalGids: number[];
  intelRdt?: LinuxIntelRdt;
  netDevices: CdiNetDevice[];
}

export interface CdiDevice {
  name: string;
  annotations: Record<string, string>;
  edits: ContainerEdits;
}

export interface CdiSpec {
  version: CdiVersion;
  kind: string;
  vendor: string;
  class: string;
  annotations: Record<string, string>;
  devices: CdiDevice[];
  /** Applied once when any device of the spec is injected. */
  edits: ContainerEdits;
}

/** A spec file that cannot be used; the message says why. */
export class SpecFileError extends Error {
  override name = 'SpecFileError';
}

type Obj = Record<string, unknown>;

const HOOK_NAMES: readonly HookStage[] = ['prestart', 'createRuntime', 'createContainer', 'startContainer', 'poststart', 'poststop'];

/** Parses spec file text (YAML 1.1 as the reference's YAML reader has it; JSON is a subset). */
export function parseSpecText(text: string): CdiSpec {
  let data: unknown;
  try {
    data = parseYaml(text, { version: '1.1', uniqueKeys: true, maxAliasCount: 100, prettyErrors: false });
  } catch (err) {
    throw new SpecFileError(`not valid JSON or YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  if (data === null || data === undefined) throw new SpecFileError('no spec data');
  return checkSpec(data);
}

/** Checks parsed data as a CDI spec. */
export function checkSpec(data: unknown): CdiSpec {
  const fields = object(data, 'spec', ['cdiVersion', 'kind', 'annotations', 'devices', 'containerEdits']);
  const rawVersion = requiredString(fields, 'cdiVersion', 'spec');
  const version = rawVersion.replace(/^v/, '');
  if (!(CDI_VERSIONS as readonly string[]).includes(version)) {
    throw new SpecFileError(`cdiVersion "${rawVersion}" is not one Stove reads (${CDI_VERSIONS[0]} to ${CDI_VERSIONS.at(-1)})`);
  }
  const kind = requiredString(fields, 'kind', 'spec');
  const split = splitKind(kind);
  if (!split) throw new SpecFileError(`kind "${kind}": want vendor.com/class`);
  const kindProblem = vendorOrClassProblem('vendor', split.vendor) ?? vendorOrClassProblem('class', split.class);
  if (kindProblem) throw new SpecFileError(`kind "${kind}": ${kindProblem}`);
  const annotations = annotationMap(fields.annotations, 'annotations');
  const edits = containerEdits(fields.containerEdits, 'containerEdits');
  if (!Array.isArray(fields.devices)) throw new SpecFileError('devices: required list missing');
  const devices = fields.devices.map((d, i) => device(d, `devices[${i}]`));
  if (!devices.length) throw new SpecFileError('invalid spec: no devices');
  const names = new Set<string>();
  for (const d of devices) {
    if (names.has(d.name)) throw new SpecFileError(`invalid spec: device "${d.name}" defined twice`);
    names.add(d.name);
  }
  const spec: CdiSpec = { version: version as CdiVersion, kind, ...split, annotations, devices, edits };
  if (spec.version === '1.1.0') {
    for (const [where, e] of [['containerEdits', edits], ...devices.map((d) => [`device "${d.name}"`, d.edits] as const)] as const) {
      const dropped = (['enableCMT', 'enableMBM'] as const).find((k) => e.intelRdt?.[k]);
      if (dropped) throw new SpecFileError(`${where}: intelRdt.${dropped} is not in cdiVersion 1.1.0 (use enableMonitoring)`);
    }
  }
  const needed = requiredVersion(spec);
  if (CDI_VERSIONS.indexOf(needed.version) > CDI_VERSIONS.indexOf(spec.version)) {
    throw new SpecFileError(`cdiVersion ${spec.version} is too old for ${needed.because}: it needs at least ${needed.version}`);
  }
  return spec;
}

/** The oldest version whose fields a spec uses, and the first field that needs it. */
export function requiredVersion(spec: CdiSpec): { version: CdiVersion; because: string } {
  const all = [spec.edits, ...spec.devices.map((d) => d.edits)];
  if (all.some((e) => e.netDevices.length)) return { version: '1.1.0', because: 'netDevices' };
  if (all.some((e) => e.intelRdt?.schemata)) return { version: '1.1.0', because: 'intelRdt.schemata' };
  if (all.some((e) => e.intelRdt?.enableMonitoring)) return { version: '1.1.0', because: 'intelRdt.enableMonitoring' };
  if (all.some((e) => e.intelRdt)) return { version: '0.7.0', because: 'intelRdt' };
  if (all.some((e) => e.additionalGids.length)) return { version: '0.7.0', because: 'additionalGids' };
  if (Object.keys(spec.annotations).length || spec.devices.some((d) => Object.keys(d.annotations).length)) {
    return { version: '0.6.0', because: 'annotations' };
  }
  if (spec.class.includes('.')) return { version: '0.6.0', because: `the dot in class "${spec.class}"` };
  const digit = spec.devices.find((d) => /^[0-9]/.test(d.name));
  if (digit) return { version: '0.5.0', because: `device name "${digit.name}" starting with a digit` };
  if (all.some((e) => e.deviceNodes.some((n) => n.hostPath))) return { version: '0.5.0', because: 'deviceNodes hostPath' };
  if (all.some((e) => e.mounts.some((m) => m.type))) return { version: '0.4.0', because: 'mounts type' };
  return { version: '0.3.0', because: 'the base fields' };
}

function device(data: unknown, where: string): CdiDevice {
  const fields = object(data, where, ['name', 'annotations', 'containerEdits']);
  const name = requiredString(fields, 'name', where);
  const problem = deviceNameProblem(name);
  if (problem) throw new SpecFileError(`${where}: ${problem}`);
  const edits = containerEdits(fields.containerEdits, `device "${name}" containerEdits`);
  if (isEmpty(edits)) throw new SpecFileError(`device "${name}": no container edits`);
  return { name, annotations: annotationMap(fields.annotations, `device "${name}" annotations`), edits };
}

function isEmpty(e: ContainerEdits): boolean {
  return !e.env.length && !e.deviceNodes.length && !e.mounts.length && !e.hooks.length && !e.additionalGids.length && !e.intelRdt && !e.netDevices.length;
}

function containerEdits(data: unknown, where: string): ContainerEdits {
  if (data === undefined || data === null) return { env: [], deviceNodes: [], mounts: [], hooks: [], additionalGids: [], netDevices: [] };
  const fields = object(data, where, ['env', 'deviceNodes', 'mounts', 'hooks', 'additionalGids', 'intelRdt', 'netDevices']);
  const env = envList(fields.env, `${where}.env`);
  const deviceNodes = list(fields.deviceNodes, `${where}.deviceNodes`).map((d, i) => deviceNode(d, `${where}.deviceNodes[${i}]`));
  const mounts = list(fields.mounts, `${where}.mounts`).map((m, i) => mount(m, `${where}.mounts[${i}]`));
  const hooks = list(fields.hooks, `${where}.hooks`).map((h, i) => hook(h, `${where}.hooks[${i}]`));
  const additionalGids = list(fields.additionalGids, `${where}.additionalGids`).map((g, i) => integer(g, `${where}.additionalGids[${i}]`, 0xffffffff));
  const netDevices = list(fields.netDevices, `${where}.netDevices`).map((n, i) => netDevice(n, `${where}.netDevices[${i}]`));
  checkNetDevicesUnique(netDevices, `${where}.netDevices`);
  const edits: ContainerEdits = { env, deviceNodes, mounts, hooks, additionalGids, netDevices };
  if (fields.intelRdt !== undefined && fields.intelRdt !== null) edits.intelRdt = intelRdt(fields.intelRdt, `${where}.intelRdt`);
  return edits;
}

/** Linux's rule for an interface name (dev_valid_name): 1 to 15 bytes, not "." or "..", no "/", ":" or blank. */
function interfaceNameProblem(name: string): string | undefined {
  if (Buffer.byteLength(name) > 15) return 'longer than 15 bytes';
  if (name === '.' || name === '..') return 'not a name';
  if (/[/:\s]/.test(name)) return 'contains "/", ":" or white space';
  return undefined;
}

function netDevice(data: unknown, where: string): CdiNetDevice {
  const fields = object(data, where, ['hostInterfaceName', 'name']);
  const hostInterfaceName = requiredString(fields, 'hostInterfaceName', where);
  const name = requiredString(fields, 'name', where);
  for (const [key, value] of [['hostInterfaceName', hostInterfaceName], ['name', name]] as const) {
    const problem = interfaceNameProblem(value);
    if (problem) throw new SpecFileError(`${where}.${key}: "${value.slice(0, 64)}" is not a network interface name (${problem})`);
  }
  return { hostInterfaceName, name };
}

/** The reference's check: one entry per host interface and per name in one set of edits. */
function checkNetDevicesUnique(devices: readonly CdiNetDevice[], where: string): void {
  const hosts = new Set<string>();
  const names = new Set<string>();
  for (const d of devices) {
    if (hosts.has(d.hostInterfaceName)) throw new SpecFileError(`${where}: host interface "${d.hostInterfaceName}" named twice`);
    if (names.has(d.name)) throw new SpecFileError(`${where}: interface name "${d.name}" used twice`);
    hosts.add(d.hostInterfaceName);
    names.add(d.name);
  }
}

function deviceNode(data: unknown, where: string): CdiDeviceNode {
  const fields = object(data, where, ['path', 'hostPath', 'type', 'major', 'minor', 'fileMode', 'permissions', 'uid', 'gid']);
  const path = requiredString(fields, 'path', where);
  if (!path.startsWith('/')) throw new SpecFileError(`${where}: path "${path}" must be absolute`);
  const node: CdiDeviceNode = { path };
  const hostPath = optionalString(fields, 'hostPath', where);
  if (hostPath) {
    if (!hostPath.startsWith('/')) throw new SpecFileError(`${where}: hostPath "${hostPath}" must be absolute`);
    node.hostPath = hostPath;
  }
  const type = optionalString(fields, 'type', where);
  if (type && !['b', 'c', 'u', 'p'].includes(type)) throw new SpecFileError(`${where}: device "${path}": invalid type "${type}"`);
  if (type) node.type = type;
  const permissions = optionalString(fields, 'permissions', where);
  if (permissions && permissions !== 'none' && !/^[rwm]+$/.test(permissions)) {
    throw new SpecFileError(`${where}: device "${path}": invalid permissions "${permissions}"`);
  }
  if (permissions) node.permissions = permissions;
  for (const key of ['major', 'minor', 'fileMode', 'uid', 'gid'] as const) {
    if (fields[key] === undefined || fields[key] === null) continue;
    node[key] = integer(fields[key], `${where}.${key}`, key === 'major' || key === 'minor' ? 0xffffffff : key === 'fileMode' ? 0o7777 : 0xffffffff);
  }
  return node;
}

function mount(data: unknown, where: string): CdiMount {
  const fields = object(data, where, ['hostPath', 'containerPath', 'options', 'type']);
  const m: CdiMount = { hostPath: requiredString(fields, 'hostPath', where), containerPath: requiredString(fields, 'containerPath', where) };
  if (!m.containerPath.startsWith('/')) throw new SpecFileError(`${where}: containerPath "${m.containerPath}" must be absolute`);
  if (fields.options !== undefined && fields.options !== null) m.options = stringList(fields.options, `${where}.options`);
  const type = optionalString(fields, 'type', where);
  if (type) m.type = type;
  return m;
}

function hook(data: unknown, where: string): CdiHook {
  const fields = object(data, where, ['hookName', 'path', 'args', 'env', 'timeout']);
  const hookName = requiredString(fields, 'hookName', where);
  if (!(HOOK_NAMES as readonly string[]).includes(hookName)) throw new SpecFileError(`${where}: invalid hook name "${hookName}"`);
  const path = requiredString(fields, 'path', where);
  if (!path.startsWith('/')) throw new SpecFileError(`${where}: hook path "${path}" must be absolute`);
  const h: CdiHook = { hookName: hookName as HookStage, path };
  if (fields.args !== undefined && fields.args !== null) h.args = stringList(fields.args, `${where}.args`);
  if (fields.env !== undefined && fields.env !== null) h.env = envList(fields.env, `${where}.env`);
  if (fields.timeout !== undefined && fields.timeout !== null) {
    h.timeout = integer(fields.timeout, `${where}.timeout`, 0x7fffffff);
    if (h.timeout <= 0) throw new SpecFileError(`${where}: timeout must be greater than zero`);
  }
  return h;
}

function intelRdt(data: unknown, where: string): LinuxIntelRdt {
  const fields = object(data, where, ['closID', 'l3CacheSchema', 'memBwSchema', 'enableCMT', 'enableMBM', 'schemata', 'enableMonitoring']);
  const rdt: LinuxIntelRdt = {};
  for (const key of ['closID', 'l3CacheSchema', 'memBwSchema'] as const) {
    const v = optionalString(fields, key, where);
    if (v) rdt[key] = v;
  }
  if (fields.schemata !== undefined && fields.schemata !== null) {
    const schemata = stringList(fields.schemata, `${where}.schemata`);
    if (schemata.length > 64 || schemata.some((l) => l.length > 4096 || l.includes('\n'))) throw new SpecFileError(`${where}.schemata: want at most 64 lines of at most 4096 characters, without newlines`);
    rdt.schemata = schemata; // present, even empty, needs 1.1.0 (as the reference has it)
  }
  for (const key of ['enableCMT', 'enableMBM', 'enableMonitoring'] as const) {
    if (fields[key] === undefined || fields[key] === null) continue;
    if (typeof fields[key] !== 'boolean') throw new SpecFileError(`${where}.${key}: want true or false`);
    if (fields[key]) rdt[key] = true;
  }
  // A CLOS is a resctrl directory name ("/" is the root group).
  const clos = rdt.closID;
  if (clos !== undefined && clos !== '/' && (clos.length >= 4096 || clos === '.' || clos === '..' || /[/\n]/.test(clos))) {
    throw new SpecFileError(`${where}: invalid closID "${clos}"`);
  }
  return rdt;
}

/** An object with only the named keys. */
function object(data: unknown, where: string, keys: readonly string[]): Obj {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) throw new SpecFileError(`${where}: want an object`);
  for (const key of Object.keys(data)) {
    if (!keys.includes(key)) throw new SpecFileError(`${where}: unknown field "${key}"`);
  }
  return data as Obj;
}

function requiredString(fields: Obj, key: string, where: string): string {
  const v = fields[key];
  if (typeof v !== 'string' || !v) throw new SpecFileError(`${where}: required field "${key}" missing or not a string`);
  return v;
}

function optionalString(fields: Obj, key: string, where: string): string | undefined {
  const v = fields[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw new SpecFileError(`${where}.${key}: want a string`);
  return v;
}

function list(v: unknown, where: string): unknown[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new SpecFileError(`${where}: want a list`);
  return v;
}

function stringList(v: unknown, where: string): string[] {
  return list(v, where).map((s, i) => {
    if (typeof s !== 'string') throw new SpecFileError(`${where}[${i}]: want a string`);
    return s;
  });
}

/** `NAME=value` entries, as the reference library checks them. */
function envList(v: unknown, where: string): string[] {
  const env = stringList(v, where);
  for (const e of env) if (e.indexOf('=') <= 0) throw new SpecFileError(`${where}: invalid environment variable "${e}"`);
  return env;
}

function integer(v: unknown, where: string, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max) throw new SpecFileError(`${where}: want an integer from 0 to ${max}`);
  return v;
}

/**
 * Annotations: string values under Kubernetes-style keys (an optional DNS-subdomain prefix and `/`,
 * then a name of at most 63 characters), 256 KiB in all.
 */
function annotationMap(v: unknown, where: string): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw new SpecFileError(`${where}: want a map of strings`);
  let size = 0;
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(v)) {
    if (typeof value !== 'string') throw new SpecFileError(`${where}: value of "${key}" is not a string`);
    if (!annotationKeyValid(key)) throw new SpecFileError(`${where}: invalid key "${key}"`);
    size += key.length + value.length;
    out[key] = value;
  }
  if (size > 256 << 10) throw new SpecFileError(`${where}: ${size} bytes, more than 256 KiB`);
  return out;
}

const NAME_PART = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

function annotationKeyValid(key: string): boolean {
  const slash = key.lastIndexOf('/');
  const name = slash < 0 ? key : key.slice(slash + 1);
  if (name.length > 63 || !NAME_PART.test(name)) return false;
  if (slash < 0) return true;
  const prefix = key.slice(0, slash);
  return prefix.length <= 253 && DNS_SUBDOMAIN.test(prefix);
}
