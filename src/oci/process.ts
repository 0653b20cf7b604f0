/**
 * The container process: argv, environment, working directory, terminal. Kubernetes' rules, as
 * containerd's `WithProcessArgs` (itself Docker's `daemon/commit.go` merge) applies them.
 */
import type { ContainerConfig } from '../gen/runtime/v1/api.js';
import { invalidArgument } from '../common/errors.js';
import { DEFAULT_PATH_ENV } from './defaults.js';
import type { ImageConfig, POSIXRlimit } from './types.js';
import { processOf, type SpecOpt } from './opts.js';
import type { ResolvedUser } from './user.js';

/**
 * argv for a container:
 * - `command` given: it replaces the image Entrypoint and the image Cmd is dropped; `args` follow it.
 * - only `args` given: the image Entrypoint followed by `args` (they replace Cmd).
 * - neither: image Entrypoint + image Cmd.
 * An `ENTRYPOINT [""]` in the image means "no entrypoint". An empty result is an InvalidArgument error.
 */
export function processArgs(command: readonly string[], args: readonly string[], image: ImageConfig): string[] {
  let cmd = [...command];
  let rest = [...args];
  if (cmd.length === 0) {
    if (rest.length === 0) rest = [...(image.Cmd ?? [])];
    const entrypoint = image.Entrypoint ?? [];
    if (!(entrypoint.length === 1 && entrypoint[0] === '')) cmd = [...entrypoint];
  }
  const argv = [...cmd, ...rest];
  if (argv.length === 0) {
    throw invalidArgument('no command specified: the container config has no command or args and the image has no Entrypoint or Cmd');
  }
  return argv;
}

/** Replaces the entry with the same key (text before the first `=`) or appends. */
export function mergeEnv(base: readonly string[], overrides: readonly string[]): string[] {
  const out = [...base];
  for (const entry of overrides) {
    const key = envKey(entry);
    const i = out.findIndex((e) => envKey(e) === key);
    if (i >= 0) out[i] = entry;
    else out.push(entry);
  }
  return out;
}

function envKey(entry: string): string {
  const eq = entry.indexOf('=');
  return eq < 0 ? entry : entry.slice(0, eq);
}

/**
 * The environment: default PATH, then HOSTNAME, then the image's Env, then the CRI envs. Later entries
 * replace earlier ones with the same key, so the CRI wins over the image, and either may replace PATH
 * or HOSTNAME (containerd's order).
 */
export function containerEnv(config: Pick<ContainerConfig, 'envs'>, image: ImageConfig, hostname: string): string[] {
  let env = [DEFAULT_PATH_ENV];
  env = mergeEnv(env, [`HOSTNAME=${hostname}`]);
  env = mergeEnv(env, image.Env ?? []);
  env = mergeEnv(env, config.envs.map((kv) => `${kv.key}=${kv.value}`));
  return env;
}

/** Working directory: the CRI's, else the image's, else `/`. */
export function workingDir(config: Pick<ContainerConfig, 'workingDir'>, image: ImageConfig): string {
  return config.workingDir || image.WorkingDir || '/';
}

/** Sets argv. */
export const withArgs = (argv: string[]): SpecOpt => (spec) => {
  processOf(spec).args = argv;
};

/** Sets the environment. */
export const withEnv = (env: string[]): SpecOpt => (spec) => {
  processOf(spec).env = env;
};

/** Sets the working directory. */
export const withCwd = (cwd: string): SpecOpt => (spec) => {
  processOf(spec).cwd = cwd;
};

/** Allocates a terminal for the process (conmon then owns the console). */
export const withTerminal = (tty: boolean): SpecOpt => (spec) => {
  if (tty) processOf(spec).terminal = true;
  else delete processOf(spec).terminal;
};

/** No rlimits: the container inherits the runtime's (containerd/cri#515: no default RLIMIT_NOFILE 1024). */
export const withoutRlimits: SpecOpt = (spec) => {
  delete processOf(spec).rlimits;
};

/** The node's default rlimits (`runtime.default_ulimits`); none configured keeps the runtime's own. */
export const withDefaultRlimits = (rlimits: readonly POSIXRlimit[] | undefined): SpecOpt => (spec) => {
  if (rlimits?.length) processOf(spec).rlimits = rlimits.map((r) => ({ ...r }));
};

/** Sets or clears no_new_privs. */
export const withNoNewPrivileges = (on: boolean): SpecOpt => (spec) => {
  processOf(spec).noNewPrivileges = on;
};

/** Sets the OOM score adjustment. */
export const withOomScoreAdj = (adj: number): SpecOpt => (spec) => {
  processOf(spec).oomScoreAdj = adj;
};

/** Sets the process user (uid, gid and supplementary groups). */
export const withUser = (user: Pick<ResolvedUser, 'uid' | 'gid' | 'additionalGids'>): SpecOpt => (spec) => {
  processOf(spec).user = { uid: user.uid, gid: user.gid, additionalGids: [...user.additionalGids] };
};
