/**
 * CDI names: a spec's `kind` (`vendor.com/class`), a device's `name`, and the fully-qualified device
 * names containers ask for (`vendor.com/class=name`), by the CDI parser's character rules. Also the
 * `cdi.k8s.io/<key>` annotations that older device plugins use instead of the CRI's `CDI_devices`.
 */
import { invalidArgument } from '../common/errors.js';

/** The annotation prefix under which device plugins pass comma-separated qualified device names. */
export const CDI_ANNOTATION_PREFIX = 'cdi.k8s.io/';

export interface QualifiedName {
  vendor: string;
  class: string;
  name: string;
}

const isLetter = (c: string) => (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
const isAlphaNumeric = (c: string) => isLetter(c) || (c >= '0' && c <= '9');

/**
 * Why a vendor or class segment is invalid, or undefined: it starts with a letter, ends with a letter
 * or digit, and has only letters, digits, `_`, `-` and `.` between.
 */
export function vendorOrClassProblem(what: 'vendor' | 'class', value: string): string | undefined {
  if (!value) return `invalid ${what}: empty name`;
  if (!isLetter(value[0]!)) return `invalid ${what} "${value}": should start with a letter`;
  for (const c of value.slice(1, -1)) {
    if (!isAlphaNumeric(c) && c !== '_' && c !== '-' && c !== '.') return `invalid ${what} "${value}": invalid character '${c}'`;
  }
  if (!isAlphaNumeric(value[value.length - 1]!)) return `invalid ${what} "${value}": should end with a letter or digit`;
  return undefined;
}

/**
 * Why a device name is invalid, or undefined: it starts and ends with a letter or digit and has only
 * letters, digits, `_`, `-`, `.` and `:` between.
 */
export function deviceNameProblem(value: string): string | undefined {
  if (!value) return 'invalid (empty) device name';
  if (!isAlphaNumeric(value[0]!)) return `invalid device name "${value}": should start with a letter or digit`;
  for (const c of value.slice(1, -1)) {
    if (!isAlphaNumeric(c) && c !== '_' && c !== '-' && c !== '.' && c !== ':') return `invalid device name "${value}": invalid character '${c}'`;
  }
  if (!isAlphaNumeric(value[value.length - 1]!)) return `invalid device name "${value}": should end with a letter or digit`;
  return undefined;
}

/** Splits a spec's `kind` at the first `/`; undefined when either side is missing. */
export function splitKind(kind: string): { vendor: string; class: string } | undefined {
  const slash = kind.indexOf('/');
  if (slash <= 0 || slash === kind.length - 1) return undefined;
  return { vendor: kind.slice(0, slash), class: kind.slice(slash + 1) };
}

/** `vendor/class=name` parsed and checked, or the reason it is not a qualified device name. */
export function parseQualifiedName(device: string): QualifiedName | { problem: string } {
  const eq = device.indexOf('=');
  const kind = eq > 0 ? splitKind(device.slice(0, eq)) : undefined;
  if (!kind || device.startsWith('/') || eq === device.length - 1) {
    return { problem: `unqualified device "${device}": want vendor.com/class=name` };
  }
  const name = device.slice(eq + 1);
  const problem = vendorOrClassProblem('vendor', kind.vendor) ?? vendorOrClassProblem('class', kind.class) ?? deviceNameProblem(name);
  if (problem) return { problem: `invalid device "${device}": ${problem}` };
  return { ...kind, name };
}

/** The qualified name of a device of a spec kind. */
export function qualifiedName(vendor: string, klass: string, name: string): string {
  return `${vendor}/${klass}=${name}`;
}

/**
 * The CDI devices a container asks for: the CRI's `CDI_devices` first, then the devices named by
 * `cdi.k8s.io/*` annotations (in key order), each once. A malformed name is InvalidArgument.
 */
export function requestedDevices(criDevices: readonly string[], annotations: Readonly<Record<string, string>>): string[] {
  const out: string[] = [];
  const seen = new Set<string>();
  const add = (device: string, from: string) => {
    const parsed = parseQualifiedName(device);
    if ('problem' in parsed) throw invalidArgument(`${from}: ${parsed.problem}`);
    if (seen.has(device)) return;
    seen.add(device);
    out.push(device);
  };
  for (const device of criDevices) add(device, 'config.CDI_devices');
  for (const key of Object.keys(annotations).sort()) {
    if (!key.startsWith(CDI_ANNOTATION_PREFIX)) continue;
    for (const device of annotations[key]!.split(',')) add(device, `annotation "${key}"`);
  }
  return out;
}
