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

/** The AppArmor profile name for the process, or undefined for none. */
export type AppArmorChoice = { kind: 'none' } | { kind: 'profile'; name: string };

/**
 * AppArmor (containerd `GenerateApparmorSpecOpts`). The `apparmor` field wins over the deprecated
 * `apparmor_profile` string (`runtime/default`, `unconfined`, `localhost/<name>`).
 * - On a host without AppArmor, anything but unconfined/unset is a FailedPrecondition error.
 * - Unconfined or privileged: no profile.
 * - RuntimeDefault: `defaultProfile` if the operator configured one, else no profile (Stove does not
 *   load an AppArmor profile of its own).
 * - Localhost: the named profile; `host-security.ts` checks it is loaded before this runs.
 */
export function selectAppArmor(
  profile: SecurityProfile | undefined,
  deprecated: string,
  privileged: boolean,
  host: { enabled: boolean; defaultProfile?: string },
): AppArmorChoice {
  const p = profile ?? appArmorFromDeprecated(deprecated);
  if (!host.enabled) {
    if (p && p.profileType !== SecurityProfile_ProfileType.Unconfined) {
      throw failedPrecondition('apparmor is not supported: AppArmor is not enabled on this host (/sys/module/apparmor/parameters/enabled)');
    }
    return { kind: 'none' };
  }
  if (!p) return host.defaultProfile && !privileged ? { kind: 'profile', name: host.defaultProfile } : { kind: 'none' };
  if (p.profileType !== SecurityProfile_ProfileType.Localhost && p.localhostRef) {
    throw invalidArgument('apparmor localhost_ref must only be set when profile_type is Localhost');
  }
  switch (p.profileType) {
    case SecurityProfile_ProfileType.Unconfined:
      return { kind: 'none' };
    case SecurityProfile_ProfileType.RuntimeDefault:
      return host.defaultProfile && !privileged ? { kind: 'profile', name: host.defaultProfile } : { kind: 'none' };
    case SecurityProfile_ProfileType.Localhost: {
      const name = p.localhostRef.replace(/^localhost\//, '');
      if (!name) throw invalidArgument('apparmor Localhost profile needs a localhost_ref');
      return { kind: 'profile', name };
    }
    default:
      throw invalidArgument(`unknown apparmor profile type ${p.profileType}`);
  }
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
