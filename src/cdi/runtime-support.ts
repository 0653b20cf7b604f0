/**
 * What of a device's edits the container's OCI runtime can do. CDI 1.1.0 edits whose runtime-spec
 * fields are newer than runtime-spec 1.0.2 (`linux.netDevices`, `linux.intelRdt.schemata` and
 * `enableMonitoring`, all of runtime-spec 1.3) are applied only when the runtime's `features` document
 * says it implements them: an older runtime (Debian 12's runc 1.1.5) ignores fields it does not know,
 * so a device would be injected without its network interface, silently. A runtime whose features say
 * nothing of a field (absent means "unknown" in runtime-spec) is taken not to have it.
 */
import type { ContainerEdits } from './spec-file.js';

export interface RuntimeSupport {
  /** The runtime as errors name it (its binary). */
  name: string;
  netDevices: boolean;
  intelRdtSchemata: boolean;
  intelRdtMonitoring: boolean;
}

/** Reads a runtime-spec features document (`runc features`; undefined when the runtime has none). */
export function runtimeSupportFrom(name: string, features: { linux?: Record<string, unknown> } | undefined): RuntimeSupport {
  const linux = features?.linux ?? {};
  const flag = (section: string, key: string) => {
    const value = linux[section];
    return typeof value === 'object' && value !== null && (value as Record<string, unknown>)[key] === true;
  };
  return {
    name,
    netDevices: flag('netDevices', 'enabled'),
    intelRdtSchemata: flag('intelRdt', 'enabled') && flag('intelRdt', 'schemata'),
    intelRdtMonitoring: flag('intelRdt', 'enabled') && flag('intelRdt', 'monitoring'),
  };
}

/**
 * The first edit of `device` the runtime cannot do, as a message naming the device, the field and the
 * runtime; undefined when it can do them all. `support` undefined: the runtime is not known to the
 * caller, and nothing that needs a newer one is applied.
 */
export function unsupportedEdit(device: string, edits: ContainerEdits, support: RuntimeSupport | undefined): string | undefined {
  const runtime = support ? `the OCI runtime ${support.name} does not (its "features" lists no` : 'the OCI runtime is not known where this injection happens (no';
  const net = edits.netDevices[0];
  if (net && !support?.netDevices) {
    return `CDI device "${device}" needs netDevices (host interface "${net.hostInterfaceName}" as "${net.name}"), which ${runtime} linux.netDevices; runtime-spec 1.3, runc >= 1.4)`;
  }
  if (edits.intelRdt?.schemata && !support?.intelRdtSchemata) {
    return `CDI device "${device}" needs intelRdt.schemata, which ${runtime} linux.intelRdt.schemata; runtime-spec 1.3)`;
  }
  if (edits.intelRdt?.enableMonitoring && !support?.intelRdtMonitoring) {
    return `CDI device "${device}" needs intelRdt.enableMonitoring, which ${runtime} linux.intelRdt.monitoring; runtime-spec 1.3)`;
  }
  return undefined;
}
