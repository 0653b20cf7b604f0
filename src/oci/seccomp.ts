/**
 * Seccomp: which profile a container gets, and turning a profile file into the spec's `linux.seccomp`.
 *
 * Profile files use the runtime-spec `LinuxSeccomp` shape, optionally with Docker's extensions: an
 * `archMap` (main architecture → sub-architectures) and per-entry `includes`/`excludes` on capabilities
 * and architectures. Stove's RuntimeDefault profile (`seccomp-default.json`) is written that way, so the
 * rules for CAP_SYS_ADMIN & co. follow the container's actual capabilities.
 */
import type { SecurityProfile } from '../gen/runtime/v1/api.js';
import { SecurityProfile_ProfileType } from '../gen/runtime/v1/api.js';
import { internal, invalidArgument } from '../common/errors.js';
import { linuxOf, processOf, type SpecOpt } from './opts.js';
import type { ProfileFilter, SeccompProfileFile } from './seccomp-profile.js';
import type { SpecSettings } from './settings.js';
import type { LinuxSeccomp, LinuxSyscall } from './types.js';

/** What the security context asks for, after the deprecated field and privileged are taken into account. */
export type SeccompChoice = { kind: 'unconfined' } | { kind: 'runtime-default' } | { kind: 'localhost'; path: string };

/**
 * The seccomp profile for a container or sandbox (containerd `GenerateSeccompSecurityProfile` +
 * `GenerateSeccompSpecOpts`): privileged → unconfined; the `seccomp` field wins over the deprecated
 * `seccomp_profile_path` (`runtime/default`, `docker/default`, `unconfined`, `localhost/<path>`); neither
 * set → unconfined (the kubelet sends RuntimeDefault explicitly when the pod asks for it).
 */
export function selectSeccomp(profile: SecurityProfile | undefined, deprecatedPath: string, privileged: boolean): SeccompChoice {
  if (privileged) return { kind: 'unconfined' };
  if (profile) {
    switch (profile.profileType) {
      case SecurityProfile_ProfileType.RuntimeDefault:
        return { kind: 'runtime-default' };
      case SecurityProfile_ProfileType.Unconfined:
        return { kind: 'unconfined' };
      case SecurityProfile_ProfileType.Localhost: {
        const path = profile.localhostRef.replace(/^localhost\//, '');
        if (!path.startsWith('/')) throw invalidArgument(`seccomp Localhost profile "${profile.localhostRef}" must be an absolute path`);
        return { kind: 'localhost', path };
      }
      default:
        throw invalidArgument(`unknown seccomp profile type ${profile.profileType}`);
    }
  }
  return seccompFromDeprecatedPath(deprecatedPath);
}

/** The deprecated `seccomp_profile_path` string forms. */
export function seccompFromDeprecatedPath(value: string): SeccompChoice {
  if (value === '' || value === 'unconfined') return { kind: 'unconfined' };
  if (value === 'runtime/default' || value === 'docker/default') return { kind: 'runtime-default' };
  if (value.startsWith('localhost/')) {
    const path = value.slice('localhost/'.length);
    if (!path.startsWith('/')) throw invalidArgument(`seccomp profile "${value}" must name an absolute path`);
    return { kind: 'localhost', path };
  }
  throw invalidArgument(`unknown seccomp profile "${value}": want runtime/default, docker/default, unconfined or localhost/<path>`);
}

/** The seccomp architecture of the host for a Node `process.arch`. */
export function seccompArchFor(nodeArch: string): string {
  switch (nodeArch) {
    case 'x64':
      return 'SCMP_ARCH_X86_64';
    case 'arm64':
      return 'SCMP_ARCH_AARCH64';
    case 'ia32':
      return 'SCMP_ARCH_X86';
    case 'arm':
      return 'SCMP_ARCH_ARM';
    case 's390x':
      return 'SCMP_ARCH_S390X';
    case 'ppc64':
      return 'SCMP_ARCH_PPC64LE';
    case 'riscv64':
      return 'SCMP_ARCH_RISCV64';
    default:
      return '';
  }
}

/** Parses a profile file's text; an unreadable profile is an InvalidArgument error naming `source`. */
export function parseSeccompProfile(text: string, source: string): SeccompProfileFile {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw invalidArgument(`seccomp profile ${source} is not valid JSON: ${(err as Error).message}`);
  }
  const p = value as SeccompProfileFile;
  if (!p || typeof p !== 'object' || typeof p.defaultAction !== 'string') {
    throw invalidArgument(`seccomp profile ${source} has no defaultAction`);
  }
  return p;
}

/**
 * The spec's `linux.seccomp` for a profile, the host architecture (seccompArchFor) and the container's
 * bounding capabilities: `archMap` becomes `architectures` for this host, and entries whose
 * includes/excludes do not match are left out.
 */
export function seccompForContainer(profile: SeccompProfileFile, arch: string, caps: readonly string[]): LinuxSeccomp {
  const out: LinuxSeccomp = { defaultAction: profile.defaultAction };
  if (profile.defaultErrnoRet !== undefined) out.defaultErrnoRet = profile.defaultErrnoRet;
  if (profile.archMap) {
    const entry = profile.archMap.find((a) => a.architecture === arch);
    if (entry) out.architectures = [entry.architecture, ...(entry.subArchitectures ?? [])];
  } else if (profile.architectures) {
    out.architectures = [...profile.architectures];
  }
  if (profile.flags?.length) out.flags = [...profile.flags];
  const syscalls: LinuxSyscall[] = [];
  for (const s of profile.syscalls ?? []) {
    if (!filterMatches(s.includes, arch, caps, true) || filterMatches(s.excludes, arch, caps, false)) continue;
    const names = s.names ?? (s.name ? [s.name] : []);
    if (names.length === 0) continue;
    const rule: LinuxSyscall = { names: [...names], action: s.action };
    if (s.errnoRet !== undefined) rule.errnoRet = s.errnoRet;
    if (s.args?.length) rule.args = s.args.map((a) => ({ ...a }));
    syscalls.push(rule);
  }
  out.syscalls = syscalls;
  return out;
}

/**
 * includes: every listed cap is held and the arch is listed (an empty filter matches).
 * excludes: any listed cap is held or the arch is listed (an empty filter matches nothing).
 */
function filterMatches(f: ProfileFilter | undefined, arch: string, caps: readonly string[], isInclude: boolean): boolean {
  const wantCaps = f?.caps ?? [];
  const wantArches = f?.arches ?? [];
  // Docker's profiles name architectures the Go way (amd64, arm64); Stove's the seccomp way.
  const archMatches = wantArches.includes(arch) || wantArches.includes(GO_ARCH[arch] ?? '');
  if (isInclude) return wantCaps.every((c) => caps.includes(c)) && (wantArches.length === 0 || archMatches);
  return wantCaps.some((c) => caps.includes(c)) || archMatches;
}

const GO_ARCH: Record<string, string> = {
  SCMP_ARCH_X86_64: 'amd64',
  SCMP_ARCH_AARCH64: 'arm64',
  SCMP_ARCH_X86: '386',
  SCMP_ARCH_ARM: 'arm',
  SCMP_ARCH_S390X: 's390x',
  SCMP_ARCH_PPC64LE: 'ppc64le',
  SCMP_ARCH_RISCV64: 'riscv64',
};

/**
 * Sets `linux.seccomp` for a choice; runs after the capabilities are final, because the RuntimeDefault
 * profile allows some syscalls only with some capabilities. `loaded` holds the Localhost profiles read
 * from disk (host-security.ts), by absolute path.
 */
export const withSeccomp = (
  choice: SeccompChoice,
  settings: Pick<SpecSettings, 'seccompDefaultProfile' | 'seccompArch'>,
  loaded: Record<string, SeccompProfileFile>,
): SpecOpt => (spec) => {
  const linux = linuxOf(spec);
  if (choice.kind === 'unconfined') {
    delete linux.seccomp;
    return;
  }
  const caps = processOf(spec).capabilities?.bounding ?? [];
  let profile: SeccompProfileFile | undefined;
  if (choice.kind === 'runtime-default') profile = settings.seccompDefaultProfile;
  else {
    profile = loaded[choice.path];
    if (!profile) throw internal(`seccomp Localhost profile "${choice.path}" was not loaded before building the spec`);
  }
  linux.seccomp = seccompForContainer(profile, settings.seccompArch, caps);
};
