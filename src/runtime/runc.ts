/**
 * The OCI runtime CLI (runc, or a runc-compatible one such as crun) for one binary and one state root.
 * Containers are created through conmon (monitor/conmon.ts); everything else about a container's
 * lifecycle goes through here. Errors carry the runtime's own message, taken from its JSON log lines.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCommand } from '../platform/processes.js';
import { StoveError, type ErrorKind } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import { stringifyInt64Json } from '../common/json.js';

/** `runc state` output (the fields Stove uses; runtimes add more). */
export interface RuncState {
  ociVersion: string;
  id: string;
  /** creating | created | running | paused | stopped */
  status: string;
  /** Host pid of the container's init; 0 once stopped. */
  pid: number;
  bundle: string;
  rootfs?: string;
  /** RFC 3339 creation time as the runtime reports it. */
  created?: string;
  annotations?: Record<string, string>;
}

/** `runc features` output (OCI runtime-spec features document; only what Stove reads is typed). */
export interface RuncFeatures {
  ociVersionMin?: string;
  ociVersionMax?: string;
  hooks?: string[];
  /** Mount options the runtime knows, e.g. `rro` for recursive read-only mounts. */
  mountOptions?: string[];
  linux?: { mountExtensions?: { idmap?: { enabled?: boolean } }; [key: string]: unknown };
  annotations?: Record<string, string>;
}

/** The runtime makes idmapped mounts (`linux.mountExtensions.idmap.enabled`: runc ≥ 1.2, crun ≥ 1.9). */
export const idmapFromFeatures = (features: RuncFeatures | undefined): boolean => features?.linux?.mountExtensions?.idmap?.enabled === true;

/** A failed runtime command: which one, its exit code and the runtime's own message. */
export class RuncError extends StoveError {
  constructor(
    kind: ErrorKind,
    message: string,
    readonly command: string,
    readonly exitCode: number | undefined,
    readonly runtimeMessage: string,
    options?: { cause?: unknown },
  ) {
    super(kind, message, options);
    this.name = `RuncError(${kind})`;
  }
}

export interface RuncOptions {
  /** Path of the runtime binary. */
  binary: string;
  /** The runtime's state directory (`--root`). */
  root: string;
  /** Pass `--systemd-cgroup` (cgroup paths are `slice:prefix:name`). */
  systemdCgroup?: boolean;
  /** Milliseconds one command may take before it is killed (default 60 s). */
  timeoutMs?: number;
  log?: Logger;
}

/** Signals as runc accepts them: a name (`SIGTERM`, `TERM`) or a number. */
export type Signal = string | number;

const DEFAULT_TIMEOUT_MS = 60_000;

/**
 * The runtime's error message from what it wrote on stderr. runc (with `--log-format json`) and crun
 * write JSON lines `{"level":"error","msg":"..."}`; runc's text format is `level=error msg="..."`.
 * Falls back to the trimmed text.
 */
export function runtimeMessage(stderr: string): string {
  const messages: string[] = [];
  for (const line of stderr.split('\n')) {
    const text = line.trim();
    if (!text) continue;
    const msg = jsonMessage(text) ?? logfmtMessage(text);
    if (msg !== undefined) messages.push(msg);
  }
  if (messages.length > 0) return messages.join('; ');
  return stderr.trim();
}

function jsonMessage(line: string): string | undefined {
  if (!line.startsWith('{')) return undefined;
  try {
    const record = JSON.parse(line) as { msg?: unknown; level?: unknown };
    if (typeof record.msg !== 'string') return undefined;
    // Only errors explain a failure; warnings and debug lines are noise in a message.
    if (record.level !== undefined && record.level !== 'error' && record.level !== 'fatal') return undefined;
    return record.msg;
  } catch {
    return undefined;
  }
}

function logfmtMessage(line: string): string | undefined {
  const match = /(?:^|\s)msg="((?:[^"\\]|\\.)*)"/.exec(line);
  if (!match) return undefined;
  if (/(?:^|\s)level=(?!error|fatal)\w+/.test(line)) return undefined;
  return match[1]!.replace(/\\(.)/g, '$1');
}

/** The error kind a runtime message implies: unknown containers are NotFound, stopped ones FailedPrecondition. */
export function runtimeErrorKind(message: string): ErrorKind {
  // runc: "container does not exist"; crun: "error opening file `<root>/<id>/status`: No such file or directory".
  if (/does not exist|container .*not found|status`: No such file or directory/i.test(message)) return 'NotFound';
  // crun: "kill container: No such process" for a container whose process is gone.
  if (/not running|is paused|is stopped|stopped container|already (?:stopped|exited)|process already finished|No such process/i.test(message)) {
    return 'FailedPrecondition';
  }
  return 'Internal';
}

/** One OCI runtime binary with its state root. */
export class Runc {
  readonly binary: string;
  readonly root: string;
  private readonly systemdCgroup: boolean;
  private readonly timeoutMs: number;
  private readonly log?: Logger;
  private knownFeatures?: Promise<RuncFeatures | undefined>;

  constructor(options: RuncOptions) {
    this.binary = options.binary;
    this.root = options.root;
    this.systemdCgroup = options.systemdCgroup ?? false;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.log = options.log;
  }

  /** Global flags placed before every subcommand; conmon receives them as `--runtime-arg`s. */
  globalArgs(): string[] {
    const args = [`--root=${this.root}`, '--log-format=json'];
    if (this.systemdCgroup) args.push('--systemd-cgroup');
    return args;
  }

  /** `runc state`: throws a NotFound RuncError for an unknown container. */
  async state(id: string): Promise<RuncState> {
    const out = await this.run(['state', id], `get state of container "${id}"`);
    return JSON.parse(out) as RuncState;
  }

  /** `runc start`: runs the user process of a created container. */
  async start(id: string): Promise<void> {
    await this.run(['start', id], `start container "${id}"`);
  }

  /**
   * `runc kill`: sends a signal to the container's init (`all`: to every process of the container).
   * Killing a stopped container is a FailedPrecondition RuncError.
   */
  async kill(id: string, signal: Signal = 'SIGTERM', all = false): Promise<void> {
    const args = ['kill'];
    if (all) args.push('--all');
    args.push(id, String(signal));
    await this.run(args, `kill container "${id}" with ${signal}`);
  }

  /**
   * `runc delete [--force]`: removes the container's runtime state (`force` kills a running one first).
   * An unknown container counts as deleted, so callers can retry and clean up idempotently.
   */
  async delete(id: string, force = false): Promise<void> {
    const args = ['delete'];
    if (force) args.push('--force');
    args.push(id);
    try {
      await this.run(args, `delete container "${id}"`);
    } catch (err) {
      if (err instanceof RuncError && err.kind === 'NotFound') return;
      throw err;
    }
  }

  /**
   * `runc update --resources <file>`: applies an OCI `linux.resources` object to a live container. A
   * file, not `-` (stdin): crun opens `-` as `/dev/stdin`, which fails on the socket the daemon's spawn
   * helper gives a child as stdin (ENXIO).
   */
  async update(id: string, resources: unknown): Promise<void> {
    const dir = await mkdtemp(join(tmpdir(), 'stove-update-'));
    try {
      const file = join(dir, 'resources.json');
      await writeFile(file, stringifyInt64Json(resources), { mode: 0o600 });
      await this.run(['update', '--resources', file, id], `update resources of container "${id}"`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  /** `runc pause` (freezes every process of the container). */
  async pause(id: string): Promise<void> {
    await this.run(['pause', id], `pause container "${id}"`);
  }

  /** `runc resume`. */
  async resume(id: string): Promise<void> {
    await this.run(['resume', id], `resume container "${id}"`);
  }

  /**
   * `runc checkpoint` through CRIU: the images go to `imagePath`, CRIU's log and stats to `workPath`
   * (CRI-O's flags: file locks are taken along; `leaveRunning` keeps the container running).
   */
  async checkpoint(id: string, opts: { imagePath: string; workPath: string; leaveRunning: boolean; timeoutMs: number }): Promise<void> {
    const args = ['checkpoint', '--file-locks', '--image-path', opts.imagePath, '--work-path', opts.workPath];
    if (opts.leaveRunning) args.push('--leave-running');
    args.push(id);
    await this.run(args, `checkpoint container "${id}"`, undefined, opts.timeoutMs);
  }

  /** `runc ps --format json`: host pids of every process in the container. */
  async pids(id: string): Promise<number[]> {
    const out = await this.run(['ps', '--format', 'json', id], `list processes of container "${id}"`);
    return (JSON.parse(out) as number[] | null) ?? [];
  }

  /** `runc list --format json`: every container under this root. */
  async list(): Promise<RuncState[]> {
    const out = await this.run(['list', '--format', 'json'], 'list containers');
    return (JSON.parse(out) as RuncState[] | null) ?? [];
  }

  /**
   * `runc features`: what the runtime supports (e.g. `mountOptions` containing `rro`). Undefined when
   * the runtime has no such command (runc < 1.1, crun < 1.9).
   */
  features(): Promise<RuncFeatures | undefined> {
    // Asked once per runtime (a CreateContainer with CDI devices asks too); a failure is asked again.
    this.featuresOnce ??= this.readFeatures().catch((err: unknown) => {
      this.featuresOnce = undefined;
      throw err;
    });
    return this.featuresOnce;
  }

  private featuresOnce: Promise<RuncFeatures | undefined> | undefined;

  private async readFeatures(): Promise<RuncFeatures | undefined> {
    try {
      return JSON.parse(await this.run(['features'], 'get runtime features')) as RuncFeatures;
    } catch (err) {
      if (err instanceof RuncError && /unknown command|no help topic|not supported|unrecognized/i.test(err.runtimeMessage)) {
        return undefined;
      }
      throw err;
    }
  }

  /**
   * `runc features`, asked once per runtime for what a container's create decides by; a failed
   * command is asked again next time. Undefined for a runtime without the command.
   */
  cachedFeatures(): Promise<RuncFeatures | undefined> {
    this.knownFeatures ??= this.features().catch((err: unknown) => {
      this.knownFeatures = undefined;
      throw err;
    });
    return this.knownFeatures;
  }

  /** Runs one subcommand; resolves with stdout, throws a RuncError naming `what`. */
  private async run(args: string[], what: string, input?: string, timeoutMs = this.timeoutMs): Promise<string> {
    const argv = [...this.globalArgs(), ...args];
    this.log?.debug('runtime command', { binary: this.binary, args: argv });
    const result = await runCommand(this.binary, { args: argv, input, env: { ...process.env, LC_ALL: 'C' }, timeoutMs });
    if (result.exitCode === 0) return result.stdout;
    let message: string;
    if (result.spawnError) message = `cannot run ${this.binary}: ${result.spawnError.message}`;
    else if (result.timedOut) message = `timed out after ${timeoutMs} ms`;
    else message = runtimeMessage(result.stderr) || runtimeMessage(result.stdout) || `exit status ${result.exitCode ?? result.signal}`;
    const kind = result.timedOut ? 'DeadlineExceeded' : result.spawnError ? 'Internal' : runtimeErrorKind(message);
    throw new RuncError(kind, `failed to ${what}: ${message}`, `${this.binary} ${args[0]}`, result.exitCode ?? undefined, message);
  }
}
