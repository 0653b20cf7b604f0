/**
 * Builds the SpecSettings once at daemon start from the configuration and what the host offers:
 * capabilities the daemon holds, its OOM score floor, cgroup version and controllers, AppArmor, the
 * seccomp architecture and profile, and whether `rro` mounts work.
 */
import { release } from 'node:os';
import { installPath } from '../common/install-dir.js';
import type { Logger } from '../common/logger.js';
import { cgroupCapabilities, detectCgroups } from '../platform/cgroups.js';
import { appArmorEnabled, appArmorProfileLoaded, ownBoundingCapabilities, ownEffectiveCapabilities, ownOomScoreAdj } from '../platform/proc.js';
import { STOVE_APPARMOR_PROFILE } from './apparmor-profile.js';
import { ensureStoveAppArmorProfile } from './host-apparmor.js';
import type { AppArmorHost } from './security.js';
import { loadDefaultSeccompProfile } from './host-security.js';
import { oomScoreClamper, type CgroupDriverName } from './resources.js';
import { seccompArchFor } from './seccomp.js';
import { normalizeCapability } from './caps.js';
import type { SpecSettings } from './settings.js';
import { parseUlimits } from '../config/ulimits.js';

export interface SpecSettingsConfig {
  defaultCapabilities: readonly string[];
  cgroupDriver: CgroupDriverName;
  /** Config `runtime.seccomp_profile`: empty = Stove's built-in RuntimeDefault profile. */
  seccompProfile: string;
  /** The runtime's `runc features` lists `rro` among its mount options. */
  runtimeSupportsRro: boolean;
  /**
   * Config `runtime.apparmor_default_profile`: the profile RuntimeDefault and an unset profile mean on an
   * AppArmor host; `stove-default` (Stove's own, loaded by Stove) when absent; `unconfined` for none.
   */
  apparmorDefaultProfile?: string;
  pidsLimit?: number;
  /** Config `runtime.default_ulimits` (validated at load). */
  defaultUlimits?: readonly string[];
  /** Config `runtime.allowed_annotations`. */
  allowedAnnotations?: readonly string[];
  /** Config `runtime.image_volumes`. */
  imageVolumes?: 'copy' | 'mkdir' | 'ignore';
  /** Config `runtime.device_ownership_from_security_context`. */
  deviceOwnershipFromSecurityContext?: boolean;
}

/** The keys of SpecSettingsConfig a reload may change. */
type LiveConfig = Pick<SpecSettingsConfig, 'pidsLimit' | 'defaultUlimits' | 'allowedAnnotations' | 'imageVolumes' | 'deviceOwnershipFromSecurityContext'>;
type LiveSettings = Pick<SpecSettings, 'pidsLimit' | 'defaultRlimits' | 'allowedAnnotations' | 'imageVolumes' | 'deviceOwnershipFromSecurityContext'>;

/** The pause container's root filesystem: `rootfs/pause` of the install directory (built by `make rootfs`). */
export const PAUSE_ROOTFS = installPath('rootfs/pause');

/** True when `runc features` output (JSON) lists the `rro` mount option (runc ≥ 1.1). */
export function rroFromRuncFeatures(featuresJson: string): boolean {
  try {
    const f = JSON.parse(featuresJson) as { mountOptions?: unknown };
    return Array.isArray(f.mountOptions) && f.mountOptions.includes('rro');
  } catch {
    return false;
  }
}

/** Linux ≥ 5.12 has mount_setattr(2), which `rro` needs. */
export function kernelSupportsRro(kernelRelease: string): boolean {
  const m = /^(\d+)\.(\d+)/.exec(kernelRelease);
  if (!m) return false;
  const [major, minor] = [Number(m[1]), Number(m[2])];
  return major > 5 || (major === 5 && minor >= 12);
}

/** The settings a config reload may change (for containers created after it). */
function liveSpecSettings(config: LiveConfig): LiveSettings {
  return {
    imageVolumes: config.imageVolumes ?? 'copy',
    deviceOwnershipFromSecurityContext: config.deviceOwnershipFromSecurityContext ?? false,
    allowedAnnotations: config.allowedAnnotations ?? [],
    pidsLimit: config.pidsLimit !== undefined && config.pidsLimit > 0 ? config.pidsLimit : undefined,
    defaultRlimits: config.defaultUlimits?.length ? parseUlimits(config.defaultUlimits) : undefined,
  };
}

/**
 * Applies a reloaded configuration to the one SpecSettings object the spec builders read at each
 * create; the host facts in it stay.
 */
export function reloadSpecSettings(settings: SpecSettings, config: LiveConfig): void {
  const live = liveSpecSettings(config);
  settings.imageVolumes = live.imageVolumes;
  settings.deviceOwnershipFromSecurityContext = live.deviceOwnershipFromSecurityContext;
  settings.allowedAnnotations = live.allowedAnnotations;
  settings.pidsLimit = live.pidsLimit;
  settings.defaultRlimits = live.defaultRlimits;
}

/** Reads the host facts and returns the settings for every spec this daemon builds. */
export async function detectSpecSettings(config: SpecSettingsConfig, log: Logger): Promise<SpecSettings> {
  // Bad names in the configuration fail the start, not every container.
  const defaultCapabilities = config.defaultCapabilities.map(normalizeCapability);
  const layout = await detectCgroups();
  const [allCapabilities, effectiveCapabilities, ownOom, cgroups, apparmor, seccompDefaultProfile] = await Promise.all([
    ownBoundingCapabilities(),
    ownEffectiveCapabilities(),
    ownOomScoreAdj(),
    cgroupCapabilities(layout),
    appArmorEnabled(),
    loadDefaultSeccompProfile(config.seccompProfile),
  ]);
  const settings: SpecSettings = {
    defaultCapabilities,
    allCapabilities,
    cgroupDriver: config.cgroupDriver,
    cgroups: { ...cgroups, hugepageLimitsSkipped: skippedHugepagesLogger(log) },
    seccompDefaultProfile,
    seccompArch: seccompArchFor(process.arch),
    recursiveReadOnlyMounts: config.runtimeSupportsRro && kernelSupportsRro(release()),
    apparmor: await appArmorHost(apparmor, config.apparmorDefaultProfile, log),
    clampOomScoreAdj: oomScoreClamper(ownOom, effectiveCapabilities, log),
    ...liveSpecSettings(config),
  };
  log.info('spec settings', {
    cgroupV2: cgroups.cgroupV2,
    swap: cgroups.swapControllerAvailable,
    hugetlb: cgroups.hugetlbControllerAvailable,
    apparmor,
    apparmorDefaultProfile: settings.apparmor.defaultProfile,
    rro: settings.recursiveReadOnlyMounts,
    ownOomScoreAdj: ownOom,
    missingCapabilities: defaultCapabilities.filter((c) => !allCapabilities.includes(c)),
  });
  return settings;
}

/**
 * AppArmor's part of the settings. On an AppArmor host Stove's default profile is loaded when the
 * kernel lacks it, in the background: compiling it takes seconds on a slow node and the API need not
 * wait (a create that needs it waits for the same load). A failure is logged, not fatal: containers
 * that ask for no profile or RuntimeDefault fail to create with the reason until it can be loaded, and
 * each such create tries again.
 */
async function appArmorHost(enabled: boolean, configured: string | undefined, log: Logger): Promise<AppArmorHost> {
  const name = configured || STOVE_APPARMOR_PROFILE;
  if (!enabled) return { enabled: false };
  if (name === 'unconfined') {
    log.warn('AppArmor: runtime.apparmor_default_profile is "unconfined": RuntimeDefault and containers that ask for no profile run unconfined');
    return { enabled: true };
  }
  const defaultIsStoves = name === STOVE_APPARMOR_PROFILE;
  if (defaultIsStoves) {
    const started = Date.now();
    void ensureStoveAppArmorProfile(name).then(
      (r) => log.info(r.loaded === 'now' ? 'AppArmor: loaded the default profile' : 'AppArmor: the default profile is loaded', { profile: name, mode: r.mode, ms: Date.now() - started }),
      (err: unknown) => log.error('AppArmor: the default profile cannot be loaded; containers that need it fail to create until it can', { profile: name, error: (err as Error).message }),
    );
  } else if (!(await appArmorProfileLoaded(name))) {
    log.warn('AppArmor: the configured default profile is not loaded; containers that need it fail to create until it is', { profile: name });
  }
  return { enabled: true, defaultProfile: name, defaultIsStoves };
}

/** Logs, the first time only, that zero hugepage limits are dropped (the kubelet sends them for every container). */
function skippedHugepagesLogger(log: Logger): (pageSizes: string[]) => void {
  let logged = false;
  return (pageSizes) => {
    if (logged) return;
    logged = true;
    log.info('zero hugepage limits are not set: the hugetlb cgroup controller is missing on this host (non-zero limits are refused)', { pageSizes });
  };
}
