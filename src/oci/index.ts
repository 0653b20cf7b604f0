/**
 * The spec module's public API: what the sandbox and container services call.
 *
 *   settings   = await detectSpecSettings(config slice, log)                (once, at start;
 *                runtimeSupportsRro = rroFromRuncFeatures(`runc features` stdout))
 *   pause:       { seccompProfiles } = await preparePauseHost(podConfig)
 *                spec = buildPauseSpec({ sandboxId, config, rootPath: PAUSE_ROOTFS, hostname, netnsPath, shmPath,
 *                                         cgroupParent, seccompProfiles, settings })
 *   container:   host = await prepareContainerHost({ config, image, rootfsPath, settings })
 *                spec = buildContainerSpec({ id, config, image, imageName, sandbox, host, targetPid, settings })
 *                host.user is what ContainerStatus reports as user.linux.
 *   update:      linuxResources(criResources, settings.cgroups) → the body of `runc update --resources`.
 *   write:       specToJson(spec) → config.json text.
 *   read:        readBundleSpec(bundleDir) → the spec in a bundle's config.json, if it is there.
 */
export type {
  Spec,
  ImageConfig,
  ImageConfigFile,
  LinuxResources,
  SpecInt,
  LinuxIntelRdt,
  IOPriority as OciIOPriority,
  Scheduler as OciScheduler,
  Mount as OciMount,
  Hook as OciHook,
  HookStage as OciHookStage,
  Hooks as OciHooks,
  LinuxDevice as OciDevice,
  POSIXRlimit as OciRlimit,
  LinuxSeccomp,
} from './types.js';
export type { SpecSettings } from './settings.js';
export type { ContainerSpecInput, ContainerHostInputs, SandboxFacts } from './container-spec.js';
export type { PauseSpecInput } from './pause-spec.js';
export type { PodFiles } from './mounts.js';
export type { PodNamespaceModes } from './namespaces.js';
export type { ResolvedUser, UserRequest } from './user.js';
export type { ResolvedDevice } from './devices.js';
export type { SeccompChoice } from './seccomp.js';
export { selectSeccomp } from './seccomp.js';
export type { SeccompProfileFile } from './seccomp-profile.js';
export type { CgroupDriverName, ResourceHost } from './resources.js';
export type { PrepareContainerInput } from './host-prepare.js';
export type { SpecSettingsConfig } from './host-settings.js';

export { buildContainerSpec } from './container-spec.js';
export { buildPauseSpec, pauseSysctls, pauseUser } from './pause-spec.js';
export { podNamespaceModes } from './namespaces.js';
export { splitDevT } from './host-devices.js';
export { cgroupsPathFor, linuxResources } from './resources.js';
export { prepareContainerHost, preparePauseHost } from './host-prepare.js';
export { detectSpecSettings, reloadSpecSettings, rroFromRuncFeatures, PAUSE_ROOTFS } from './host-settings.js';
export { STOVE_APPARMOR_PROFILE } from './apparmor-profile.js';
export { findAppArmorParser } from './host-apparmor.js';

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseInt64Json, stringifyInt64Json } from '../common/json.js';
import type { Spec } from './types.js';

/** config.json text for a spec (int64 limits beyond 2^53 as exact digits). */
export function specToJson(spec: Spec): string {
  return stringifyInt64Json(spec, 2) + '\n';
}

/**
 * The spec in a bundle's config.json, or undefined when it is gone or unreadable. Read synchronously:
 * verbose status calls read it, and through the thread pool it waits behind the fsyncs of concurrent
 * lifecycles.
 */
export function readBundleSpec(bundleDir: string): Spec | undefined {
  try {
    return parseInt64Json<Spec>(readFileSync(join(bundleDir, 'config.json'), 'utf8'));
  } catch {
    return undefined;
  }
}
