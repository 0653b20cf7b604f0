/**
 * `buildPauseSpec`: the config.json of a pod's pause container (containerd `sandboxContainerSpec`):
 * Stove's own `rootfs/pause` read-only, `/bin/pause`, the pod hostname, the pod namespaces, the pod's
 * /dev/shm, its sysctls, CPU shares 2 and OOM score -998 (clamped to what the daemon may set).
 */
import type { PodSandboxConfig } from '../gen/runtime/v1/api.js';
import { sandboxAnnotations, withCriAnnotations } from './annotations.js';
import { withCapabilities } from './caps.js';
import { DEFAULT_PATH_ENV, PAUSE_COMMAND, PAUSE_CPU_SHARES, PAUSE_OOM_SCORE_ADJ, POD_NETWORK_DEFAULT_SYSCTLS, standardMounts, sysBindMount } from './defaults.js';
import { pauseNamespaces, podNamespaceModes, withNamespaces, type PodNamespaceModes } from './namespaces.js';
import { applyOpts, emptySpec, type SpecOpt } from './opts.js';
import { withArgs, withCwd, withEnv, withNoNewPrivileges, withOomScoreAdj, withUser, withoutRlimits } from './process.js';
import { cgroupsPathFor, withCgroupsPath, withCpuShares } from './resources.js';
import { selectSeccomp, withSeccomp } from './seccomp.js';
import type { SeccompProfileFile } from './seccomp-profile.js';
import { withMaskedPaths, withReadonlyRoot, withRoot } from './security.js';
import type { SpecSettings } from './settings.js';
import { validateSysctls, withSysctls } from './sysctls.js';
import type { Mount, Spec } from './types.js';
import { invalidArgument } from '../common/errors.js';

export interface PauseSpecInput {
  sandboxId: string;
  config: PodSandboxConfig;
  /** Absolute path of the pause root filesystem (the repo's `rootfs/pause`). */
  rootPath: string;
  /** The pod hostname (the node's when the pod gave none); unused with host network. */
  hostname: string;
  /** The pinned network namespace; required unless the pod uses the host network. */
  netnsPath?: string;
  /** The pod's /dev/shm tmpfs, or `/dev/shm` for host IPC. */
  shmPath: string;
  /** The pod cgroup parent; the pause container goes to `<parent>/<sandboxId>`. */
  cgroupParent: string;
  /** Name recorded in the image-name annotation. */
  imageName?: string;
  /** Localhost seccomp profiles read from disk, by absolute path (host-prepare.ts). */
  seccompProfiles?: Record<string, SeccompProfileFile>;
  settings: SpecSettings;
}

/** Builds the pause container's spec. Throws InvalidArgument for bad sysctls, users or profiles. */
export function buildPauseSpec(input: PauseSpecInput): Spec {
  const { config, settings } = input;
  const sc = config.linux?.securityContext;
  const modes = podNamespaceModes(sc?.namespaceOptions);
  const privileged = sc?.privileged ?? false;
  const clamp = settings.clampOomScoreAdj ?? ((n: number) => n);
  const opts: SpecOpt[] = [
    withRoot(input.rootPath),
    withReadonlyRoot(true),
    withArgs([PAUSE_COMMAND]),
    withEnv([DEFAULT_PATH_ENV]),
    withCwd('/'),
    withoutRlimits,
    withNoNewPrivileges(true),
    withUser(pauseUser(config)),
    withPauseHostname(modes, input.hostname),
    withPauseMounts(input.shmPath, modes),
    withMaskedPaths([], [], privileged),
    withCapabilities(settings.defaultCapabilities, undefined, settings.allCapabilities),
    withSysctls(pauseSysctls(config, modes)),
    withCpuShares(PAUSE_CPU_SHARES),
    withOomScoreAdj(clamp(PAUSE_OOM_SCORE_ADJ)),
    withCgroupsPath(cgroupsPathFor(input.cgroupParent, input.sandboxId, settings.cgroupDriver)),
    withNamespaces(pauseNamespaces(modes, input.netnsPath), modes),
    withSeccomp(selectSeccomp(sc?.seccomp, sc?.seccompProfilePath ?? '', privileged), settings, input.seccompProfiles ?? {}),
    withCriAnnotations(
      config.annotations,
      sandboxAnnotations(
        { sandboxId: input.sandboxId, name: config.metadata?.name ?? '', namespace: config.metadata?.namespace ?? '', uid: config.metadata?.uid ?? '' },
        config.logDirectory,
        input.imageName ?? 'stove/pause',
      ),
      settings.allowedAnnotations,
    ),
  ];
  return applyOpts(emptySpec(), opts);
}

/** The pause process user: run_as_user/run_as_group of the pod (no passwd in the pause rootfs). */
export function pauseUser(config: PodSandboxConfig): { uid: number; gid: number; additionalGids: number[] } {
  const sc = config.linux?.securityContext;
  const uid = sc?.runAsUser ? Number(sc.runAsUser.value) : 0;
  if (!sc?.runAsUser && sc?.runAsGroup) throw invalidArgument('linux.security_context.run_as_group is specified without run_as_user');
  const gid = sc?.runAsGroup ? Number(sc.runAsGroup.value) : 0;
  for (const [what, v] of [['run_as_user', uid], ['run_as_group', gid]] as const) {
    if (!Number.isInteger(v) || v < 0 || v > 2 ** 31 - 1) throw invalidArgument(`linux.security_context.${what} ${v} is out of range`);
  }
  const gids = new Set([gid, ...(sc?.supplementalGroups ?? []).map(Number)]);
  return { uid, gid, additionalGids: [...gids].sort((a, b) => a - b) };
}

/** The pod's sysctls, checked, plus the unprivileged-port and ping defaults for pod-network pods. */
export function pauseSysctls(config: PodSandboxConfig, modes: PodNamespaceModes): Record<string, string> {
  const sysctls = validateSysctls(config.linux?.sysctls ?? {}, { hostNetwork: modes.hostNetwork, hostIpc: modes.hostIpc });
  if (!modes.hostNetwork) {
    for (const [k, v] of Object.entries(POD_NETWORK_DEFAULT_SYSCTLS)) {
      // A user namespace cannot map the whole gid range, so containerd skips ping_group_range there.
      if (k === 'net.ipv4.ping_group_range' && modes.userns) continue;
      if (!(k in sysctls)) sysctls[k] = v;
    }
  }
  return sysctls;
}

const withPauseHostname = (modes: PodNamespaceModes, hostname: string): SpecOpt => (spec) => {
  // Without its own UTS namespace runc refuses to set a hostname.
  if (!modes.hostNetwork && hostname) spec.hostname = hostname;
};

/** Standard mounts plus the pod shm, read-only: the pause process never writes it. */
const withPauseMounts = (shmPath: string, modes: PodNamespaceModes): SpecOpt => (spec) => {
  const mounts: Mount[] = standardMounts().map((m) => (m.destination === '/sys' && modes.userns ? sysBindMount() : m));
  mounts.push({ destination: '/dev/shm', type: 'bind', source: shmPath, options: ['rbind', 'ro', 'nosuid', 'nodev', 'noexec'] });
  spec.mounts = mounts;
};
