/**
 * The one way the daemon starts a child process (eslint.config.js forbids `node:child_process` and
 * execa everywhere else in src/). Two shapes:
 *
 * - `runCommand`: run to completion with input on stdin, a timeout and a cap on the output it keeps
 *   (the OCI runtime's CLI, CNI plugins, util-linux when the mount helper is not built, mknod). Started
 *   in a process group of its own: a timeout kills the whole group, so what the command started dies
 *   too, and the call answers once the command itself is dead, even if a straggler that left the group
 *   still holds its output pipes.
 * - `startProcess`: a long-lived child with pipes that the caller owns (conmon, socat for port-forward,
 *   the attach relay, NRI plugins).
 *
 * Both start the child through the spawn helper (spawn-helper.ts: no fork of the daemon), except a
 * long-lived child whose pipes carry a stream's bulk data (`directPipes`): the helper reads every pipe
 * as soon as it can and forwards it, so a slow reader on the daemon's side would pile data up in
 * memory; a pipe straight to the daemon stops the child instead.
 */
import { spawn } from 'node:child_process';
import { spawnProcess, type SpawnedProcess, type SpawnProcessOptions } from './spawn-helper.js';

export type { SpawnedProcess } from './spawn-helper.js';

export interface CommandResult {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  /** More than `maxOutputBytes` came on stdout or stderr: what is here is its beginning. */
  truncated: boolean;
  /** The command never ran (ENOENT, EACCES). */
  spawnError?: Error;
}

/** Bytes of stdout and of stderr a command's result keeps by default (the rest is read and dropped). */
const DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 * 1024;

export interface RunCommandOptions {
  args?: readonly string[];
  input?: string | Buffer;
  /** The command's whole environment (default: the daemon's). */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** After this long the command's process group is killed (SIGKILL); no limit when undefined. */
  timeoutMs: number | undefined;
  /** Bytes kept of stdout and of stderr each (default DEFAULT_MAX_OUTPUT_BYTES). */
  maxOutputBytes?: number;
}

/** Runs `file` and collects its exit status and output; never rejects. */
export function runCommand(file: string, options: RunCommandOptions): Promise<CommandResult> {
  const cap = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
  return new Promise((resolve) => {
    const out = new OutputBuffer(cap);
    const err = new OutputBuffer(cap);
    let timedOut = false;
    let settled = false;
    let timer: NodeJS.Timeout | undefined;
    const finish = (r: Pick<CommandResult, 'exitCode' | 'signal' | 'spawnError'>) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ ...r, timedOut, truncated: out.truncated || err.truncated, stdout: out.text(), stderr: err.text() });
    };
    const child = spawnProcess(file, options.args ?? [], { stdio: ['pipe', 'pipe', 'pipe'], env: options.env, cwd: options.cwd, detached: true });
    if (options.timeoutMs !== undefined) {
      timer = setTimeout(() => {
        timedOut = true;
        try {
          process.kill(-child.pid!, 'SIGKILL');
        } catch {
          child.kill('SIGKILL');
        }
        // The command may have exited already, with a straggler outside its group holding the pipes.
        if (child.exitCode !== null || child.signalCode !== null) finish({ exitCode: child.exitCode, signal: child.signalCode });
        else child.once('exit', (exitCode: number | null, signal: NodeJS.Signals | null) => finish({ exitCode, signal }));
      }, options.timeoutMs);
    }
    child.stdout!.on('data', (d: Buffer) => out.add(d));
    child.stderr!.on('data', (d: Buffer) => err.add(d));
    child.once('error', (spawnError: Error) => finish({ exitCode: null, signal: null, spawnError }));
    child.once('close', (exitCode: number | null, signal: NodeJS.Signals | null) => finish({ exitCode, signal }));
    child.stdin!.on('error', () => {}); // a command may exit without reading its input
    child.stdin!.end(options.input ?? '');
  });
}

/** Why a command did not succeed, in its own words where it gave any (stderr, else stdout). */
export function commandFailure(r: CommandResult): string {
  if (r.spawnError) return r.spawnError.message;
  const said = (r.stderr || r.stdout).trim();
  if (said) return said;
  if (r.timedOut) return 'timed out';
  return r.signal ? `killed by ${r.signal}` : `exit status ${r.exitCode}`;
}

/** The first `cap` bytes of a stream; the rest is counted out. */
class OutputBuffer {
  private readonly chunks: Buffer[] = [];
  private length = 0;
  truncated = false;

  constructor(private readonly cap: number) {}

  add(chunk: Buffer): void {
    const room = this.cap - this.length;
    if (chunk.length > room) this.truncated = true;
    if (room <= 0) return;
    const kept = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.chunks.push(kept);
    this.length += kept.length;
  }

  text(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }
}

export interface StartProcessOptions extends SpawnProcessOptions {
  /**
   * The pipes carry a stream's data (port-forward, attach output, a plugin's connection): connect them
   * straight to the daemon, with backpressure, rather than through the spawn helper.
   */
  directPipes?: boolean;
}

/** Starts a long-lived `file`; the caller owns the process and its pipes ('error' if it cannot start). */
export function startProcess(file: string, args: readonly string[], options: StartProcessOptions): SpawnedProcess {
  const { directPipes, ...spawnOptions } = options;
  if (!directPipes) return spawnProcess(file, args, spawnOptions);
  return spawn(file, args, { stdio: spawnOptions.stdio, cwd: spawnOptions.cwd, env: spawnOptions.env, detached: spawnOptions.detached }) as unknown as SpawnedProcess;
}
