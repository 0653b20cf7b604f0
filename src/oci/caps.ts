/**
 * Capabilities: a configurable default set, then the CRI's add/drop lists (containerd
 * `WithCapabilities`, CRI-O `SpecSetupCapabilities`). Names are accepted as `CAP_X` or `X`, any case.
 * "ALL" is applied before single names, so `add: [ALL], drop: [CHOWN]` is everything but CHOWN.
 * Inheritable stays empty and ambient holds only `add_ambient_capabilities` (CVE-2022-27652: a
 * non-empty inheritable set lets file capabilities escalate).
 */
import type { Capability } from '../gen/runtime/v1/api.js';
import { failedPrecondition, invalidArgument } from '../common/errors.js';
import { ALL_CAPABILITIES } from './defaults.js';
import type { LinuxCapabilities } from './types.js';
import { processOf, type SpecOpt } from './opts.js';

/** `chown`, `CAP_CHOWN`, `cap_chown` → `CAP_CHOWN`; unknown names are an InvalidArgument error. */
export function normalizeCapability(name: string): string {
  const upper = name.trim().toUpperCase();
  const full = upper.startsWith('CAP_') ? upper : `CAP_${upper}`;
  if (!ALL_CAPABILITIES.includes(full)) throw invalidArgument(`unknown capability "${name}"`);
  return full;
}

const isAll = (name: string) => name.trim().toUpperCase() === 'ALL';

/**
 * The capability set for a container. `allCaps` is every capability the daemon itself holds (its
 * bounding set): "ALL" and privileged mean those, since runc cannot grant more than it has.
 */
export function capabilitySet(defaults: readonly string[], request: Capability | undefined, allCaps: readonly string[]): string[] {
  // A default the daemon does not hold is left out rather than failing every container.
  let caps = defaults.map(normalizeCapability).filter((c) => allCaps.includes(c));
  const add = request?.addCapabilities ?? [];
  const drop = request?.dropCapabilities ?? [];
  if (add.some(isAll)) caps = [...allCaps];
  if (drop.some(isAll)) caps = [];
  for (const c of add.filter((c) => !isAll(c)).map(normalizeCapability)) {
    if (!allCaps.includes(c)) throw failedPrecondition(`capability ${c} was requested but the runtime itself does not hold it`);
    if (!caps.includes(c)) caps.push(c);
  }
  const dropped = new Set(drop.filter((c) => !isAll(c)).map(normalizeCapability));
  return caps.filter((c) => !dropped.has(c));
}

/** The process capability sets for a list of capabilities plus ambient ones. */
export function linuxCapabilities(caps: readonly string[], ambient: readonly string[] = []): LinuxCapabilities {
  const all = [...caps];
  for (const a of ambient) if (!all.includes(a)) all.push(a);
  return {
    bounding: [...all],
    effective: [...all],
    permitted: [...all],
    inheritable: [...ambient],
    ambient: [...ambient],
  };
}

/** Applies the capability rules for a container. */
export const withCapabilities = (defaults: readonly string[], request: Capability | undefined, allCaps: readonly string[]): SpecOpt => (spec) => {
  const caps = capabilitySet(defaults, request, allCaps);
  const ambient = (request?.addAmbientCapabilities ?? []).map(normalizeCapability);
  processOf(spec).capabilities = linuxCapabilities(caps, ambient);
};

/** Every capability the daemon holds, in all sets but inheritable/ambient (containerd `WithPrivileged`). */
export const withAllCapabilities = (allCaps: readonly string[]): SpecOpt => (spec) => {
  processOf(spec).capabilities = linuxCapabilities(allCaps);
};
