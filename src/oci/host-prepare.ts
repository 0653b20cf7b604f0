/**
 * Everything buildContainerSpec needs from the host, gathered in one call before the pure builder:
 * the user from the image's /etc/passwd and /etc/group, prepared mounts, devices, Localhost seccomp
 * profiles, and the AppArmor profile check. For the pause container, only the seccomp profile.
 */
import type { ContainerConfig, PodSandboxConfig } from '../gen/runtime/v1/api.js';
import type { ContainerHostInputs } from './container-spec.js';
import { listHostDevices, resolveDevices } from './host-devices.js';
import { prepareMounts } from './host-mounts.js';
import { checkAppArmorProfile } from './host-apparmor.js';
import { loadSeccompProfiles } from './host-security.js';
import { readUserDatabase } from './host-user.js';
import { selectSeccomp } from './seccomp.js';
import type { SeccompProfileFile } from './seccomp-profile.js';
import { selectAppArmor } from './security.js';
import type { SpecSettings } from './settings.js';
import type { ImageConfig } from './types.js';
import { resolveUser, userRequestFrom } from './user.js';

export interface PrepareContainerInput {
  config: ContainerConfig;
  image: ImageConfig;
  /** Host path of the container's mounted root filesystem (where etc/passwd is read). */
  rootfsPath: string;
  settings: Pick<SpecSettings, 'apparmor'>;
}

/** Does the host-side work for an app container; throws the errors the request deserves. */
export async function prepareContainerHost(input: PrepareContainerInput): Promise<ContainerHostInputs> {
  const sc = input.config.linux?.securityContext;
  const privileged = sc?.privileged ?? false;
  const seccomp = selectSeccomp(sc?.seccomp, sc?.seccompProfilePath ?? '', privileged);
  const apparmor = selectAppArmor(sc?.apparmor, sc?.apparmorProfile ?? '', privileged, input.settings.apparmor);
  await checkAppArmorProfile(apparmor);
  const seccompProfiles = await loadSeccompProfiles([seccomp]);
  const { passwd, group } = await readUserDatabase(input.rootfsPath);
  const user = resolveUser(passwd, group, userRequestFrom(sc, input.image));
  const mounts = await prepareMounts(input.config.mounts);
  const devices = await resolveDevices(input.config.devices);
  const hostDevices = privileged ? await listHostDevices() : [];
  return { user, mounts, devices, hostDevices, seccompProfiles };
}

/** Loads the Localhost seccomp profile a pod sandbox asks for (if any), for buildPauseSpec. */
export async function preparePauseHost(config: PodSandboxConfig): Promise<{ seccompProfiles: Record<string, SeccompProfileFile> }> {
  const sc = config.linux?.securityContext;
  const choice = selectSeccomp(sc?.seccomp, sc?.seccompProfilePath ?? '', sc?.privileged ?? false);
  return { seccompProfiles: await loadSeccompProfiles([choice]) };
}
