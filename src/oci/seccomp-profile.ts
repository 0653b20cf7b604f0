/** The seccomp profile file format (Docker's and containers/common's JSON): what a profile file holds. */
import type { LinuxSeccompArg, SeccompAction } from './types.js';

/** A profile file: LinuxSeccomp plus Docker's optional extensions. */
export interface SeccompProfileFile {
  defaultAction: SeccompAction;
  defaultErrnoRet?: number;
  architectures?: string[];
  archMap?: { architecture: string; subArchitectures?: string[] }[];
  flags?: string[];
  syscalls?: ProfileSyscall[];
}

export interface ProfileSyscall {
  names?: string[];
  /** Docker's older single-name form. */
  name?: string;
  action: SeccompAction;
  errnoRet?: number;
  args?: LinuxSeccompArg[] | null;
  includes?: ProfileFilter;
  excludes?: ProfileFilter;
  comment?: string;
}

export interface ProfileFilter {
  caps?: string[];
  arches?: string[];
}
