/**
 * AppArmor on the host: loading Stove's default profile (`apparmor-profile.ts`) with `apparmor_parser`
 * when the kernel does not have it, and checking that the profile a container is to run under is
 * loaded before runc is asked to apply it (runc's own error comes late and says little).
 *
 * The default profile is loaded at daemon start (`detectSpecSettings`) and, when it is gone (an operator
 * removed it, the parser was installed after the start), again at the next create that needs it, as
 * containerd's `WithDefaultProfile` and CRI-O's `reloadDefaultProfile` do. A profile already loaded is
 * left as it is: `apparmor_parser -R stove-default` and a restart load the current text.
 */
import { access, readFile } from 'node:fs/promises';
import { failedPrecondition } from '../common/errors.js';
import { appArmorProfileMode } from '../platform/proc.js';
import { commandFailure, runCommand } from '../platform/processes.js';
import { daemonProfileFrom, renderAppArmorProfile, STOVE_APPARMOR_PROFILE, type AppArmorProfileFacts } from './apparmor-profile.js';
import type { AppArmorChoice } from './security.js';

/** Where the parser lives on Debian and Ubuntu (`apparmor` package), then wherever PATH finds it. */
const PARSER_PATHS = ['/usr/sbin/apparmor_parser', '/sbin/apparmor_parser'];

/** How long one apparmor_parser run may take (compiling the profile: under a second on a node, tens of seconds in an emulated guest). */
const PARSER_TIMEOUT_MS = 120_000;

/** AppArmor's policy directory, where the includes the profile uses live. */
const APPARMOR_DIR = '/etc/apparmor.d';

const exists = (path: string) => access(path).then(() => true, () => false);

/** The apparmor_parser binary, or undefined when it is not installed. */
export async function findAppArmorParser(): Promise<string | undefined> {
  for (const path of PARSER_PATHS) if (await exists(path)) return path;
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir.startsWith('/') && (await exists(`${dir}/apparmor_parser`))) return `${dir}/apparmor_parser`;
  }
  return undefined;
}

/** The facts the default profile's text depends on, read from this host. */
export async function appArmorProfileFacts(name: string): Promise<AppArmorProfileFacts> {
  const [abi3, tunables, baseAbstraction, current] = await Promise.all([
    exists(`${APPARMOR_DIR}/abi/3.0`),
    exists(`${APPARMOR_DIR}/tunables/global`),
    exists(`${APPARMOR_DIR}/abstractions/base`),
    readFile('/proc/self/attr/current', 'utf8').catch(() => ''),
  ]);
  return { name, abi3, tunables, baseAbstraction, daemonProfile: daemonProfileFrom(current) };
}

/** What loading the default profile did. */
export type DefaultProfileLoad = { loaded: 'already' | 'now'; mode: string };

let inFlight: Promise<DefaultProfileLoad> | undefined;

/**
 * Makes sure Stove's default profile is loaded: nothing when the kernel lists it, else renders it and
 * runs `apparmor_parser -Kr` (replace, no cache written) with it on stdin. Concurrent callers share one
 * run. Throws FailedPrecondition with the parser's own words when it cannot be loaded.
 */
export function ensureStoveAppArmorProfile(name = STOVE_APPARMOR_PROFILE): Promise<DefaultProfileLoad> {
  inFlight ??= loadDefaultProfile(name).finally(() => {
    inFlight = undefined;
  });
  return inFlight;
}

async function loadDefaultProfile(name: string): Promise<DefaultProfileLoad> {
  const before = await appArmorProfileMode(name);
  if (before) return { loaded: 'already', mode: before };
  const parser = await findAppArmorParser();
  if (!parser) {
    throw failedPrecondition(
      `AppArmor profile "${name}" is not loaded and apparmor_parser is not installed to load it: install the apparmor package (apt-get install apparmor), or set runtime.apparmor_default_profile to a loaded profile`,
    );
  }
  const text = renderAppArmorProfile(await appArmorProfileFacts(name));
  const r = await runCommand(parser, { args: ['-Kr'], input: text, timeoutMs: PARSER_TIMEOUT_MS, maxOutputBytes: 64 * 1024 });
  if (r.exitCode !== 0) throw failedPrecondition(`AppArmor profile "${name}" could not be loaded: ${parser} -Kr: ${commandFailure(r)}`);
  const after = await appArmorProfileMode(name);
  if (!after) throw failedPrecondition(`AppArmor profile "${name}" is not listed by the kernel after ${parser} -Kr loaded it`);
  return { loaded: 'now', mode: after };
}

/**
 * Throws FailedPrecondition, naming the profile, when the one chosen for a container is not loaded:
 * the request is valid, and the same request succeeds once the node has the profile. Stove's own
 * default is loaded on the spot.
 */
export async function checkAppArmorProfile(choice: AppArmorChoice): Promise<void> {
  if (choice.kind !== 'profile') return;
  if (await appArmorProfileMode(choice.name)) return;
  switch (choice.source) {
    case 'stove-default':
      await ensureStoveAppArmorProfile(choice.name);
      return;
    case 'configured-default':
      throw failedPrecondition(
        `AppArmor profile "${choice.name}" (runtime.apparmor_default_profile, for RuntimeDefault and containers that ask for no profile) is not loaded on this node: load it with apparmor_parser -r <file>`,
      );
    case 'localhost':
      throw failedPrecondition(
        `AppArmor profile "${choice.name}" (Localhost) is not loaded on this node: load it with apparmor_parser -r <file> before creating the container (/sys/kernel/security/apparmor/profiles lists the loaded ones)`,
      );
  }
}
