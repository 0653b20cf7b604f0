/**
 * What the spec builders need to know about Stove's configuration and the host. The daemon builds one
 * `SpecSettings` at start-up (`host-settings.ts` `detectSpecSettings`) and hands it to the sandbox and
 * container services; tests build it by hand.
 */
import type { ResourceHost, CgroupDriverName } from './resources.js';
import type { SeccompProfileFile } from './seccomp-profile.js';
import type { POSIXRlimit } from './types.js';

export interface SpecSettings {
  /** Capabilities every container starts with (config `runtime.default_capabilities`). */
  defaultCapabilities: readonly string[];
  /** Every capability the daemon holds (its bounding set): what "ALL" and privileged grant. */
  allCapabilities: readonly string[];
  cgroupDriver: CgroupDriverName;
  /** cgroup version and available controllers. */
  cgroups: ResourceHost;
  /** The RuntimeDefault seccomp profile (Stove's `seccomp-default.json` unless configured). */
  seccompDefaultProfile: SeccompProfileFile;
  /** Seccomp architecture of the host (`SCMP_ARCH_X86_64`…), see seccompArchFor. */
  seccompArch: string;
  /** The runtime accepts the `rro` mount option. */
  recursiveReadOnlyMounts: boolean;
  /** AppArmor on the host; `defaultProfile` is used for RuntimeDefault when set. */
  apparmor: { enabled: boolean; defaultProfile?: string };
  /** Raises an OOM score the daemon could not set (see `oomScoreClamper`); identity when absent. */
  clampOomScoreAdj?: (requested: number) => number;
  /** A pids limit for every app container; 0, negative or absent = none. */
  pidsLimit?: number;
  /** CRI annotations allowed into the spec (`runtime.allowed_annotations`); absent = none. */
  allowedAnnotations?: readonly string[];
  /** Rlimits for every app container (`runtime.default_ulimits`); absent = the runtime's own. */
  defaultRlimits?: readonly POSIXRlimit[];
  /** What an image's declared VOLUMEs get (`runtime.image_volumes`); absent = `copy`. */
  imageVolumes?: 'copy' | 'mkdir' | 'ignore';
  /** CRI devices owned by runAsUser/runAsGroup (`runtime.device_ownership_from_security_context`). */
  deviceOwnershipFromSecurityContext?: boolean;
}
