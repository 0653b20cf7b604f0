/**
 * `buildContainerSpec`: the config.json of an app container, as a pure function of its CRI config, the
 * sandbox's facts, the image config and what the host preparation found (host-prepare.ts). Reads like
 * containerd's `buildLinuxSpec`: a list of named steps applied to an empty spec.
 *
 * Not in the spec (conmon's business): stdin, stdin_once, log_path. The image's declared Volumes come
 * in as CRI mounts (or directories made in the root filesystem) from the container module
 * (container/declared-volumes.ts), by `runtime.image_volumes`.
 */
import { NamespaceMode, type ContainerConfig, type Mount as CriMount, type PodSandboxConfig } from '../gen/runtime/v1/api.js';
import { invalidArgument } from '../common/errors.js';
import { containerAnnotations, withCriAnnotations } from './annotations.js';
import { withAllCapabilities, withCapabilities } from './caps.js';
import { devicesOwnedByRunAs, withAllDevicesAllowed, withDevices, type ResolvedDevice } from './devices.js';
import { withContainerMounts, type PodFiles } from './mounts.js';
import { containerNamespaces, podNamespaceModes, withNamespaces, type PodNamespaceModes } from './namespaces.js';
import { applyOpts, emptySpec, type SpecOpt } from './opts.js';
import { containerEnv, processArgs, withArgs, withCwd, withEnv, withNoNewPrivileges, withOomScoreAdj, withTerminal, withUser, withoutRlimits, withDefaultRlimits, workingDir } from './process.js';
import { cgroupsPathFor, toSpecNumber, withCgroupsPath, withResources } from './resources.js';
import { selectSeccomp, withSeccomp } from './seccomp.js';
import type { SeccompProfileFile } from './seccomp-profile.js';
import { selectAppArmor, withAppArmor, withMaskedPaths, withReadonlyRoot, withRoot, withWritableSysfsAndCgroupfs } from './security.js';
import type { SpecSettings } from './settings.js';
import type { ImageConfig, Spec } from './types.js';
import type { ResolvedUser } from './user.js';

/** What an app container needs to know about its pod. */
export interface SandboxFacts {
  /** Sandbox ID. */
  id: string;
  /** The pod's config as given to RunPodSandbox (metadata, security context, namespace options). */
  config: PodSandboxConfig;
  /** The pod hostname (the node's when the pod gave none): the HOSTNAME variable. */
  hostname: string;
  /** PID of the running pause process; its /proc/<pid>/ns/* are joined. */
  pausePid: number;
  /** The pinned network namespace (pod network only); preferred over /proc/<pausePid>/ns/net. */
  netnsPath?: string;
  /** The pod's /etc/hostname, /etc/hosts, /etc/resolv.conf and /dev/shm sources. */
  files: PodFiles;
  /** The pod's cgroup parent (the request's, or Stove's default for the pod). */
  cgroupParent: string;
}

/** Results of host-prepare.ts `prepareContainerHost` (I/O done before this pure builder). */
export interface ContainerHostInputs {
  /** Who the process runs as (resolveUser against the image's /etc/passwd and /etc/group). */
  user: ResolvedUser;
  /** The CRI mounts with host paths created and symlinks resolved (prepareMounts). */
  mounts: CriMount[];
  /** The CRI devices, stat'ed (resolveDevices). */
  devices: ResolvedDevice[];
  /** Every host device, for privileged containers (listHostDevices); empty otherwise. */
  hostDevices: ResolvedDevice[];
  /** Localhost seccomp profiles read from disk, by absolute path. */
  seccompProfiles: Record<string, SeccompProfileFile>;
}

export interface ContainerSpecInput {
  /** Container ID. */
  id: string;
  config: ContainerConfig;
  /** The image config's `config` object. */
  image: ImageConfig;
  /** The image as the user named it, for the image-name annotation. */
  imageName: string;
  /** `root.path`: absolute, or relative to the bundle; default `rootfs`. */
  rootPath?: string;
  sandbox: SandboxFacts;
  host: ContainerHostInputs;
  /** PID of the target container's init, for namespace_options.pid = TARGET. */
  targetPid?: number;
  settings: SpecSettings;
}

/** Builds the app container's OCI spec. Throws StoveError (mostly InvalidArgument) on a bad request. */
export function buildContainerSpec(input: ContainerSpecInput): Spec {
  const { config, sandbox, settings, host } = input;
  const sc = config.linux?.securityContext;
  const podSc = sandbox.config.linux?.securityContext;
  const privileged = sc?.privileged ?? false;
  if (privileged && !podSc?.privileged) {
    throw invalidArgument('no privileged container allowed in sandbox: the pod sandbox is not privileged');
  }
  const modes = podNamespaceModes(podSc?.namespaceOptions);
  checkUsernsMatchesPod(config, modes);
  const readonlyRootfs = sc?.readonlyRootfs ?? false;
  const namespaces = containerNamespaces(
    modes,
    { pausePid: sandbox.pausePid, netnsPath: sandbox.netnsPath, targetPid: input.targetPid },
    sc?.namespaceOptions?.pid ?? NamespaceMode.POD,
    { cgroupV2: settings.cgroups.cgroupV2, privileged },
  );
  const clamp = settings.clampOomScoreAdj ?? ((n: number) => n);
  const resources = config.linux?.resources;

  const opts: SpecOpt[] = [
    withRoot(input.rootPath ?? 'rootfs'),
    withReadonlyRoot(readonlyRootfs),
    withArgs(processArgs(config.command, config.args, input.image)),
    withEnv(containerEnv(config, input.image, sandbox.hostname)),
    withCwd(workingDir(config, input.image)),
    withTerminal(config.tty),
    withoutRlimits,
    withDefaultRlimits(settings.defaultRlimits),
    withNoNewPrivileges(sc?.noNewPrivs ?? false),
    withUser(host.user),
    withContainerMounts(host.mounts, sandbox.files, {
      privileged,
      bindSys: modes.userns,
      recursiveReadOnlySupported: settings.recursiveReadOnlyMounts,
      readonlyRootfs,
    }),
    withMaskedPaths(sc?.maskedPaths ?? [], sc?.readonlyPaths ?? [], privileged),
    withDevices(settings.deviceOwnershipFromSecurityContext ? devicesOwnedByRunAs(host.devices, sc?.runAsUser?.value, sc?.runAsGroup?.value) : host.devices),
    withCapabilities(settings.defaultCapabilities, sc?.capabilities, settings.allCapabilities),
    ...(privileged
      ? [withAllCapabilities(settings.allCapabilities), withWritableSysfsAndCgroupfs, withDevices(host.hostDevices), withAllDevicesAllowed]
      : []),
    withAppArmor(selectAppArmor(sc?.apparmor, sc?.apparmorProfile ?? '', privileged, settings.apparmor)),
    withResources(resources, settings.cgroups, settings.pidsLimit),
    ...(resources && resources.oomScoreAdj !== 0n ? [withOomScoreAdj(clamp(toSpecNumber(resources.oomScoreAdj, 'oom_score_adj')))] : []),
    withCgroupsPath(cgroupsPathFor(sandbox.cgroupParent, input.id, settings.cgroupDriver)),
    withNamespaces(namespaces, modes),
    withSeccomp(selectSeccomp(sc?.seccomp, sc?.seccompProfilePath ?? '', privileged), settings, host.seccompProfiles),
    withCriAnnotations(
      config.annotations,
      containerAnnotations(
        { sandboxId: sandbox.id, name: sandbox.config.metadata?.name ?? '', namespace: sandbox.config.metadata?.namespace ?? '', uid: sandbox.config.metadata?.uid ?? '' },
        config.metadata?.name ?? '',
        input.imageName,
      ),
      settings.allowedAnnotations,
    ),
  ];
  return applyOpts(emptySpec(), opts);
}

/** A container that states a user namespace setting must state the pod's (containerd `sameUsernsConfig`). */
function checkUsernsMatchesPod(config: ContainerConfig, pod: PodNamespaceModes): void {
  const own = config.linux?.securityContext?.namespaceOptions?.usernsOptions;
  if (!own) return; // not stated: the container follows the pod
  const wantsOwn = own?.mode === NamespaceMode.POD;
  if (wantsOwn !== pod.userns) {
    throw invalidArgument('user namespace config for the container differs from the pod sandbox\'s (namespace_options.userns_options)');
  }
  if (!wantsOwn) return;
  const same = (a: { containerId: number; hostId: number; length: number }[], b: { containerID: number; hostID: number; size: number }[]) =>
    a.length === b.length && a.every((m, i) => m.containerId === b[i]!.containerID && m.hostId === b[i]!.hostID && m.length === b[i]!.size);
  if (!same(own.uids, pod.uidMappings) || !same(own.gids, pod.gidMappings)) {
    throw invalidArgument('user namespace mappings of the container differ from the pod sandbox\'s');
  }
}
