/**
 * Security settings other than capabilities and seccomp: masked and read-only /proc and /sys paths,
 * AppArmor, read-only root, privileged mode.
 */
import { SecurityProfile, SecurityProfile_ProfileType } from '../gen/runtime/v1/api.js';
import { failedPrecondition, invalidArgument } from '../common/errors.js';
import { DEFAULT_MASKED_PATHS, DEFAULT_READONLY_PATHS } from './defaults.js';
import type { Mount } from './types.js';
import { linuxOf, processOf, type SpecOpt } from './opts.js';

/**
 * Masked and read-only paths. Privileged: none. Otherwise the request's lists; when the request gives
 * none, the kubelet's defaults (containerd would leave them empty). Note: the CRI cannot tell "not set"
 * from "empty", so a kubelet asking for `procMount: Unmasked` (empty lists) still gets the defaults.
 */
export const withMaskedPaths = (masked: readonly string[], readonly: readonly string[], privileged: boolean): SpecOpt => (spec) => {
  const linux = linuxOf(spec);
  if (privileged) {
    delete linux.maskedPaths;
    delete linux.readonlyPaths;
    return;
  }
  linux.maskedPaths = masked.length ? [...masked] : [...DEFAULT_MASKED_PATHS];
  linux.readonlyPaths = readonly.length ? [...readonly] : [...DEFAULT_READONLY_PATHS];
};

/** Sets root.path: absolute, or relative to the bundle directory. */
export const withRoot = (path: string): SpecOpt => (spec) => {
  spec.root = { ...(spec.root ?? {}), path };
};

/** Makes the root filesystem read-only (or writable). */
export const withReadonlyRoot = (readonly: boolean): SpecOpt => (spec) => {
  spec.root ??= { path: 'rootfs' };
  if (readonly) spec.root.readonly = true;
  else delete spec.root.readonly;
};

/** AppArmor on the host, as the spec builders see it (`SpecSettings.apparmor`). */
export interface AppArmorHost {
  /** AppArmor is enabled and its securityfs mounted (`platform/proc.ts` `appArmorEnabled`). */
  enabled: boolean;
  /**
   * The profile RuntimeDefault and an unset profile mean: Stove's `stove-default` unless
   * `runtime.apparmor_default_profile` names another; undefined when it is `unconfined`.
   */
  defaultProfile?: string;
  /** `defaultProfile` is Stove's own, which Stove loads when the kernel does not have it. */
  defaultIsStoves?: boolean;
}

/** Where a chosen profile comes from: the runtime's default (Stove's own or configured), or a Localhost request. */
export type AppArmorSource = 'stove-default' | 'configured-default' | 'localhost';

/** The AppArmor profile the container's process runs under, or none (unconfined). */
export type AppArmorChoice = { kind: 'none' } | { kind: 'profile'; name: string; source: AppArmorSource };

/** A Localhost profile name: printable, no whitespace, bounded (the kernel's list is what decides the rest). */
const LOCALHOST_NAME = /^[^\s\x00-\x1f\x7f]{1,4096}$/;

/**
 * AppArmor (containerd `GenerateApparmorSpecOpts`). The `apparmor` field wins over the deprecated
 * `apparmor_profile` string (`runtime/default`, `unconfined`, `localhost/<name>`).
 * - On a host without AppArmor, anything but unconfined/unset is a FailedPrecondition error.
 * - Unconfined: no profile.
 * - RuntimeDefault, and no profile at all (the kubelet sends none when the pod names none; containerd
 *   and CRI-O confine such containers too, kubernetes#51746): the host's default profile, `stove-default`
 *   unless configured otherwise; none for a privileged container or when the default is `unconfined`.
 * - Localhost: the named profile, privileged or not (as containerd); `host-apparmor.ts` checks it is
 *   loaded before the spec is built.
 */
export function selectAppArmor(profile: SecurityProfile | undefined, deprecated: string, privileged: boolean, host: AppArmorHost): AppArmorChoice {
  const p = profile ?? appArmorFromDeprecated(deprecated);
  if (!host.enabled) {
    if (p && p.profileType !== SecurityProfile_ProfileType.Unconfined) {
      throw failedPrecondition('apparmor is not supported: AppArmor is not enabled on this host (/sys/module/apparmor/parameters/enabled)');
    }
    return { kind: 'none' };
  }
  if (!p) return runtimeDefault(host, privileged);
  if (p.profileType !== SecurityProfile_ProfileType.Localhost && p.localhostRef) {
    throw invalidArgument('apparmor localhost_ref must only be set when profile_type is Localhost');
  }
  switch (p.profileType) {
    case SecurityProfile_ProfileType.Unconfined:
      return { kind: 'none' };
    case SecurityProfile_ProfileType.RuntimeDefault:
      return runtimeDefault(host, privileged);
    case SecurityProfile_ProfileType.Localhost: {
      const name = p.localhostRef.replace(/^localhost\//, '');
      if (!name) throw invalidArgument('apparmor Localhost profile needs a localhost_ref');
      if (!LOCALHOST_NAME.test(name)) throw invalidArgument(`apparmor Localhost profile name ${JSON.stringify(name.slice(0, 256))} is not a profile name (printable, no whitespace, at most 4096 bytes)`);
      return { kind: 'profile', name, source: 'localhost' };
    }
    default:
      throw invalidArgument(`unknown apparmor profile type ${p.profileType}`);
  }
}

function runtimeDefault(host: AppArmorHost, privileged: boolean): AppArmorChoice {
  if (privileged || !host.defaultProfile) return { kind: 'none' };
  return { kind: 'profile', name: host.defaultProfile, source: host.defaultIsStoves ? 'stove-default' : 'configured-default' };
}

/** The deprecated string form as a SecurityProfile (undefined when empty). */
export function appArmorFromDeprecated(value: string): SecurityProfile | undefined {
  if (!value) return undefined;
  if (value === 'unconfined') return SecurityProfile.fromPartial({ profileType: SecurityProfile_ProfileType.Unconfined });
  if (value === 'runtime/default') return SecurityProfile.fromPartial({ profileType: SecurityProfile_ProfileType.RuntimeDefault });
  if (value.startsWith('localhost/')) {
    return SecurityProfile.fromPartial({ profileType: SecurityProfile_ProfileType.Localhost, localhostRef: value.slice('localhost/'.length) });
  }
  throw invalidArgument(`unknown apparmor profile "${value}": want runtime/default, unconfined or localhost/<name>`);
}

/** Sets the AppArmor profile. */
export const withAppArmor = (choice: AppArmorChoice): SpecOpt => (spec) => {
  if (choice.kind === 'profile') processOf(spec).apparmorProfile = choice.name;
  else delete processOf(spec).apparmorProfile;
};

/** Privileged mounts: sysfs and cgroupfs writable (containerd `WithWriteableSysfs`/`WithWriteableCgroupfs`). */
export const withWritableSysfsAndCgroupfs: SpecOpt = (spec) => {
  spec.mounts = (spec.mounts ?? []).map((m): Mount => {
    if (m.type !== 'sysfs' && m.type !== 'cgroup') return m;
    return { ...m, options: [...(m.options ?? []).filter((option) => option !== 'ro'), ...((m.options ?? []).includes('rw') ? [] : ['rw'])] };
  });
};
