/**
 * Host-side security preparation: reading seccomp profile files (Stove's RuntimeDefault profile and
 * Localhost ones). AppArmor's is in host-apparmor.ts.
 */
import { readFile } from 'node:fs/promises';
import { invalidArgument, wrap } from '../common/errors.js';
import { installPath } from '../common/install-dir.js';
import { parseSeccompProfile, type SeccompChoice } from './seccomp.js';
import type { SeccompProfileFile } from './seccomp-profile.js';

/** Where Stove's RuntimeDefault profile lives: `src/oci/seccomp-default.json` of the install directory. */
export const BUILTIN_SECCOMP_PROFILE = installPath('src/oci/seccomp-default.json');

/** Loads the RuntimeDefault profile: the configured file, or Stove's own when `path` is empty. */
export async function loadDefaultSeccompProfile(path = ''): Promise<SeccompProfileFile> {
  const file = path || BUILTIN_SECCOMP_PROFILE;
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw wrap(err, `failed to read the default seccomp profile ${file}`, 'FailedPrecondition');
  }
  return parseSeccompProfile(text, file);
}

/** Reads the Localhost profiles among `choices`; a missing or unreadable file is an InvalidArgument error. */
export async function loadSeccompProfiles(choices: readonly SeccompChoice[]): Promise<Record<string, SeccompProfileFile>> {
  const out: Record<string, SeccompProfileFile> = {};
  for (const c of choices) {
    if (c.kind !== 'localhost' || out[c.path]) continue;
    let text: string;
    try {
      text = await readFile(c.path, 'utf8');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') throw invalidArgument(`seccomp Localhost profile "${c.path}" does not exist`);
      throw wrap(err, `failed to read seccomp profile "${c.path}"`, 'InvalidArgument');
    }
    out[c.path] = parseSeccompProfile(text, c.path);
  }
  return out;
}
