/**
 * What of a container's spec the container's OCI runtime can do, from its runtime-spec `features`
 * document (`runc features`, `crun features`). An older runtime (Debian 12's runc 1.1.5) ignores fields
 * it does not know, so a container would run without what a CDI device or an NRI plugin asked for,
 * silently: fields newer than runtime-spec 1.0.2 are applied only when the document says the runtime
 * implements them. A runtime whose document says nothing of a field (absent means "unknown" in
 * runtime-spec), or that has no `features` command (crun before 1.9), is taken not to have it.
 *
 * - `linux.netDevices`, `linux.intelRdt.schemata` and `enableMonitoring` (runtime-spec 1.3): their own
 *   entries of the document (`linux.netDevices.enabled`, `linux.intelRdt.schemata`/`monitoring`); a
 *   `closID` alone needs `linux.intelRdt.enabled`.
 * - `process.ioPriority` and `process.scheduler` (runtime-spec 1.1) have no entry of their own: a
 *   runtime implements them when its `ociVersionMax` is 1.1.0 or later (runc 1.2 and later say 1.2.0
 *   and up and implement both; runc 1.1 says 1.0.2-dev and has neither).
 */
import type { ContainerEdits } from './spec-file.js';

export interface RuntimeSupport {
  /** The runtime as errors name it (its binary). */
  name: string;
  /** Its `ociVersionMax`, '' when it has no features document. */
  ociVersionMax: string;
  netDevices: boolean;
  intelRdt: boolean;
  intelRdtSchemata: boolean;
  intelRdtMonitoring: boolean;
  ioPriority: boolean;
  scheduler: boolean;
}

/** `major.minor.patch` of a runtime-spec version ("1.0.2-dev" → [1, 0, 2]); undefined when it is none. */
function versionOf(v: string): [number, number, number] | undefined {
  const m = /^(\d{1,4})\.(\d{1,4})\.(\d{1,4})(?:[-+].*)?$/.exec(v);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : undefined;
}

/** True when runtime-spec version `v` is `at` or later. */
function atLeast(v: string, at: [number, number, number]): boolean {
  const got = versionOf(v);
  if (!got) return false;
  for (let i = 0; i < 3; i++) if (got[i] !== at[i]) return got[i]! > at[i]!;
  return true;
}

/** Reads a runtime-spec features document (`runc features`; undefined when the runtime has none). */
export function runtimeSupportFrom(name: string, features: { ociVersionMax?: unknown; linux?: Record<string, unknown> } | undefined): RuntimeSupport {
  const linux = features?.linux ?? {};
  const flag = (section: string, key: string) => {
    const value = linux[section];
    return typeof value === 'object' && value !== null && (value as Record<string, unknown>)[key] === true;
  };
  const ociVersionMax = typeof features?.ociVersionMax === 'string' ? features.ociVersionMax.slice(0, 64) : '';
  const v11 = atLeast(ociVersionMax, [1, 1, 0]);
  return {
    name,
    ociVersionMax,
    netDevices: flag('netDevices', 'enabled'),
    intelRdt: flag('intelRdt', 'enabled'),
    intelRdtSchemata: flag('intelRdt', 'enabled') && flag('intelRdt', 'schemata'),
    intelRdtMonitoring: flag('intelRdt', 'enabled') && flag('intelRdt', 'monitoring'),
    ioPriority: v11,
    scheduler: v11,
  };
}

/** A spec field newer than runtime-spec 1.0.2 that a runtime may lack. */
export type RuntimeField = 'netDevices' | 'intelRdt' | 'intelRdtSchemata' | 'intelRdtMonitoring' | 'ioPriority' | 'scheduler';

const FIELDS: Record<RuntimeField, { field: string; entry: string; since: string }> = {
  netDevices: { field: 'linux.netDevices', entry: 'linux.netDevices', since: 'runtime-spec 1.3, runc >= 1.4' },
  intelRdt: { field: 'linux.intelRdt', entry: 'linux.intelRdt', since: 'runc >= 1.2 lists it' },
  intelRdtSchemata: { field: 'linux.intelRdt.schemata', entry: 'linux.intelRdt.schemata', since: 'runtime-spec 1.3, runc >= 1.4' },
  intelRdtMonitoring: { field: 'linux.intelRdt.enableMonitoring', entry: 'linux.intelRdt.monitoring', since: 'runtime-spec 1.3, runc >= 1.4' },
  ioPriority: { field: 'process.ioPriority', entry: '', since: 'runtime-spec 1.1, runc >= 1.2, crun >= 1.9' },
  scheduler: { field: 'process.scheduler', entry: '', since: 'runtime-spec 1.1, runc >= 1.2, crun >= 1.9' },
};

/**
 * Why the runtime does not do `field`, as the end of a sentence naming the runtime ("the OCI runtime
 * /usr/bin/runc does not (…)"); undefined when it does. `support` undefined: the runtime is not known
 * to the caller, and nothing that needs a newer one is applied.
 */
export function lacksField(field: RuntimeField, support: RuntimeSupport | undefined): string | undefined {
  if (support?.[field]) return undefined;
  const f = FIELDS[field];
  if (!support) return `the OCI runtime may not do: it is not known here (${f.field}: ${f.since})`;
  const why = f.entry
    ? `its "features" lists no ${f.entry}`
    : support.ociVersionMax
      ? `its "features" gives ociVersionMax ${support.ociVersionMax}, before 1.1.0`
      : 'it has no "features" document';
  return `the OCI runtime ${support.name} does not (${why}; ${f.field}: ${f.since})`;
}

/**
 * The first edit of `device` the runtime cannot do, as a message naming the device, the field and the
 * runtime; undefined when it can do them all.
 */
export function unsupportedEdit(device: string, edits: ContainerEdits, support: RuntimeSupport | undefined): string | undefined {
  const net = edits.netDevices[0];
  let lack: string | undefined;
  if (net && (lack = lacksField('netDevices', support))) {
    return `CDI device "${device}" needs netDevices (host interface "${net.hostInterfaceName}" as "${net.name}"), which ${lack}`;
  }
  if (edits.intelRdt?.schemata && (lack = lacksField('intelRdtSchemata', support))) return `CDI device "${device}" needs intelRdt.schemata, which ${lack}`;
  if (edits.intelRdt?.enableMonitoring && (lack = lacksField('intelRdtMonitoring', support))) return `CDI device "${device}" needs intelRdt.enableMonitoring, which ${lack}`;
  return undefined;
}
