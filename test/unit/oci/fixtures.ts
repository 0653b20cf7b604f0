/**
 * Test data for the spec builders, in the manner of containerd's `getCreateContainerTestData`: a
 * container config, a sandbox, an image config and host inputs that tests change one field at a time.
 */
import { readFileSync } from 'node:fs';
import {
  ContainerConfig,
  PodSandboxConfig,
  type DeepPartial,
} from '../../../src/gen/runtime/v1/api.js';
import { CONTAINERD_DEFAULT_CAPABILITIES } from '../../../src/config/schema.js';
import { ALL_CAPABILITIES } from '../../../src/oci/defaults.js';
import { BUILTIN_SECCOMP_PROFILE } from '../../../src/oci/host-security.js';
import { parseSeccompProfile } from '../../../src/oci/seccomp.js';
import type { SpecSettings } from '../../../src/oci/settings.js';
import type { ContainerHostInputs, ContainerSpecInput, SandboxFacts } from '../../../src/oci/container-spec.js';
import { buildContainerSpec } from '../../../src/oci/container-spec.js';
import type { ImageConfig, Spec } from '../../../src/oci/types.js';

export const SANDBOX_ID = 'a'.repeat(64);
export const CONTAINER_ID = 'c'.repeat(64);
export const PAUSE_PID = 4242;

export const defaultProfile = parseSeccompProfile(readFileSync(BUILTIN_SECCOMP_PROFILE, 'utf8'), BUILTIN_SECCOMP_PROFILE);

/** Settings of a cgroup v1 host like this one, without CAP_SYS_RESOURCE. */
export function testSettings(over: Partial<SpecSettings> = {}): SpecSettings {
  return {
    defaultCapabilities: [...CONTAINERD_DEFAULT_CAPABILITIES],
    allCapabilities: ALL_CAPABILITIES.filter((c) => c !== 'CAP_SYS_RESOURCE'),
    cgroupDriver: 'cgroupfs',
    cgroups: { cgroupV2: false, swapControllerAvailable: true, hugetlbControllerAvailable: false },
    seccompDefaultProfile: defaultProfile,
    seccompArch: 'SCMP_ARCH_X86_64',
    recursiveReadOnlyMounts: true,
    apparmor: { enabled: false },
    clampOomScoreAdj: (n) => Math.max(n, 0),
    ...over,
  };
}

export function podConfig(p: DeepPartial<PodSandboxConfig> = {}): PodSandboxConfig {
  return PodSandboxConfig.fromPartial({
    metadata: { name: 'pod', namespace: 'ns', uid: 'uid-1', attempt: 0 },
    hostname: 'pod-host',
    logDirectory: '/var/log/pods/ns_pod_uid-1',
    ...p,
  });
}

export function containerConfig(p: DeepPartial<ContainerConfig> = {}): ContainerConfig {
  return ContainerConfig.fromPartial({
    metadata: { name: 'app', attempt: 1 },
    image: { image: 'busybox:latest' },
    command: ['/bin/sh'],
    args: ['-c', 'sleep 1'],
    envs: [{ key: 'K1', value: 'V1' }],
    annotations: { 'c.annotation': 'x' },
    ...p,
  });
}

export const imageConfig = (over: Partial<ImageConfig> = {}): ImageConfig => ({
  Entrypoint: ['/entry'],
  Cmd: ['cmd-arg'],
  Env: ['IMAGE=1', 'PATH=/image/bin'],
  WorkingDir: '/image-wd',
  ...over,
});

export function sandboxFacts(config = podConfig(), over: Partial<SandboxFacts> = {}): SandboxFacts {
  return {
    id: SANDBOX_ID,
    config,
    hostname: config.hostname || 'node',
    pausePid: PAUSE_PID,
    netnsPath: '/run/netns/test',
    files: {
      hostnamePath: `/run/stove/sandboxes/${SANDBOX_ID}/hostname`,
      hostsPath: `/run/stove/sandboxes/${SANDBOX_ID}/hosts`,
      resolvConfPath: `/run/stove/sandboxes/${SANDBOX_ID}/resolv.conf`,
      shmPath: `/run/stove/sandboxes/${SANDBOX_ID}/shm`,
    },
    cgroupParent: '/kubepods/pod-uid-1',
    ...over,
  };
}

export function hostInputs(config: ContainerConfig, over: Partial<ContainerHostInputs> = {}): ContainerHostInputs {
  return {
    user: { uid: 0, gid: 0, additionalGids: [0] },
    mounts: config.mounts,
    devices: [],
    hostDevices: [],
    seccompProfiles: {},
    ...over,
  };
}

export interface BuildOptions {
  config?: ContainerConfig;
  pod?: PodSandboxConfig;
  image?: ImageConfig;
  settings?: SpecSettings;
  host?: Partial<ContainerHostInputs>;
  sandbox?: Partial<SandboxFacts>;
  targetPid?: number;
}

/** Builds an app container spec from the fixtures with some parts replaced. */
export function build(o: BuildOptions = {}): Spec {
  const config = o.config ?? containerConfig();
  const input: ContainerSpecInput = {
    id: CONTAINER_ID,
    config,
    image: o.image ?? imageConfig(),
    imageName: 'docker.io/library/busybox:latest',
    sandbox: sandboxFacts(o.pod ?? podConfig(), o.sandbox),
    host: hostInputs(config, o.host),
    settings: o.settings ?? testSettings(),
    ...(o.targetPid ? { targetPid: o.targetPid } : {}),
  };
  return buildContainerSpec(input);
}
