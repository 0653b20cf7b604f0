/**
 * Running one CNI plugin binary (CNI spec §"Protocol"): the request goes in `CNI_*` environment
 * variables plus a JSON config on stdin; the plugin answers with a JSON result (ADD, VERSION) or a
 * JSON error `{code, msg, details}` on stdout and a non-zero exit. Error texts follow libcni's, since
 * they are what Kubernetes users see in pod events.
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { runCommand } from '../platform/processes.js';
import { StoveError, type ErrorKind } from '../common/errors.js';
import type { Logger } from '../common/logger.js';

export type CniCommand = 'ADD' | 'DEL' | 'CHECK' | 'VERSION';

/** The per-call parameters (the spec's CNI_* variables). */
export interface CniInvocation {
  command: Exclude<CniCommand, 'VERSION'>;
  containerId: string;
  /** Path of the network namespace; may be empty for DEL when the namespace is gone. */
  netns: string;
  ifName: string;
  /** `CNI_ARGS`, `K=V;K=V`. */
  cniArgs: string;
}

/** VERSION's answer. */
export interface CniVersionInfo {
  cniVersion: string;
  supportedVersions: string[];
}

/** A failed plugin call. `executed` is false when the plugin never ran (binary missing, not runnable). */
export class CniError extends StoveError {
  constructor(
    kind: ErrorKind,
    message: string,
    readonly executed: boolean,
  ) {
    super(kind, message);
  }
}

/** The JSON error object plugins print on failure. */
interface PluginErrorJson {
  code?: number;
  msg?: string;
  details?: string;
}

/** The message libcni makes of a failed plugin's output (invoke.pluginErr). */
export function pluginFailureMessage(exitCode: number | undefined, stdout: string, stderr: string): { message: string; code?: number } {
  if (stdout.trim() === '') {
    if (stderr.trim() === '') return { message: `netplugin failed with no error message: exit status ${exitCode ?? 'unknown'}` };
    return { message: `netplugin failed: ${JSON.stringify(stderr)}` };
  }
  let parsed: PluginErrorJson;
  try {
    parsed = JSON.parse(stdout) as PluginErrorJson;
    if (typeof parsed !== 'object' || parsed === null) throw new Error('not a JSON object');
  } catch (err) {
    return { message: `netplugin failed but error parsing its diagnostic message ${JSON.stringify(stdout)}: ${(err as Error).message}` };
  }
  const details = parsed.details ? `; ${parsed.details}` : '';
  const msg = parsed.msg || details ? `${parsed.msg ?? ''}${details}` : `netplugin failed: ${JSON.stringify(stdout.trim())}`;
  return { message: msg, code: parsed.code };
}

/** Error code 11 is the spec's "try again later". */
function kindForCode(code: number | undefined): ErrorKind {
  return code === 11 ? 'Unavailable' : 'Internal';
}

export interface CniExecOptions {
  /** Directories searched for plugin binaries, in order; also passed as CNI_PATH. */
  binDirs: string[];
  /** Seconds one call may take before the plugin is killed. */
  timeoutSeconds: number;
  log: Logger;
}

/** Finds and runs plugin binaries. */
export class CniExec {
  constructor(private readonly options: CniExecOptions) {}

  /** The binary for plugin `type`: the first regular file of that name in the bin dirs. */
  async findPlugin(type: string): Promise<string> {
    if (type.includes('/')) throw new CniError('InvalidArgument', `invalid plugin name: ${type}`, false);
    for (const dir of this.options.binDirs) {
      const path = join(dir, type);
      const st = await stat(path).catch(() => undefined);
      if (st?.isFile()) return path;
    }
    throw new CniError('FailedPrecondition', `failed to find plugin ${JSON.stringify(type)} in path [${this.options.binDirs.join(' ')}]`, false);
  }

  /** Runs ADD/DEL/CHECK; returns the parsed stdout for ADD, undefined otherwise. */
  async invoke(pluginPath: string, call: CniInvocation, config: Record<string, unknown>): Promise<unknown> {
    const env = {
      CNI_COMMAND: call.command,
      CNI_CONTAINERID: call.containerId,
      CNI_NETNS: call.netns,
      CNI_IFNAME: call.ifName,
      CNI_ARGS: call.cniArgs,
    };
    const stdout = await this.run(pluginPath, env, config);
    if (call.command !== 'ADD') return undefined;
    return parseJsonOutput(stdout, 'result');
  }

  /** Asks a plugin which spec versions it speaks. */
  async version(pluginPath: string, cniVersion: string): Promise<CniVersionInfo> {
    const stdout = await this.run(pluginPath, { CNI_COMMAND: 'VERSION' }, { cniVersion });
    const info = parseJsonOutput(stdout, 'version info') as Partial<CniVersionInfo>;
    return { cniVersion: info.cniVersion ?? '', supportedVersions: info.supportedVersions ?? ['0.1.0'] };
  }

  private async run(pluginPath: string, cniEnv: Record<string, string>, config: Record<string, unknown>): Promise<string> {
    const timeoutMs = this.options.timeoutSeconds * 1000;
    const started = Date.now();
    const r = await runCommand(pluginPath, {
      env: { ...process.env, ...cniEnv, CNI_PATH: this.options.binDirs.join(':') },
      input: JSON.stringify(config),
      timeoutMs,
    });
    this.options.log.debug('cni plugin call', {
      plugin: pluginPath,
      command: cniEnv.CNI_COMMAND,
      containerId: cniEnv.CNI_CONTAINERID,
      exitCode: r.exitCode,
      ms: Date.now() - started,
      ...(r.stderr ? { stderr: r.stderr.slice(0, 2000) } : {}),
    });
    if (r.timedOut) throw new CniError('DeadlineExceeded', `timed out after ${this.options.timeoutSeconds}s`, true);
    if (r.spawnError) throw new CniError('Internal', `cannot run ${pluginPath}: ${r.spawnError.message}`, false);
    if (r.signal) throw new CniError('Internal', `netplugin was killed by ${r.signal}`, true);
    if (r.exitCode !== 0) {
      const failure = pluginFailureMessage(r.exitCode ?? undefined, r.stdout, r.stderr);
      throw new CniError(kindForCode(failure.code), failure.message, true);
    }
    return r.stdout;
  }
}


function parseJsonOutput(stdout: string, what: string): unknown {
  try {
    const value = JSON.parse(stdout) as unknown;
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error('not a JSON object');
    return value;
  } catch (err) {
    throw new CniError('Internal', `plugin returned an invalid ${what} ${JSON.stringify(stdout.slice(0, 500))}: ${(err as Error).message}`, true);
  }
}
