/**
 * Runs a short-lived command to completion with input on stdin and a timeout (the OCI runtime's CLI,
 * CNI plugins). Started through the spawn helper (no fork of the daemon) in a process group of its own:
 * a timeout kills the whole group, so what the command started dies too, and the call answers once the
 * command itself is dead, even if a straggler that left the group still holds its output pipes.
 */
import { spawnProcess } from './spawn-helper.js';

export interface CommandResult {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  /** The command never ran (ENOENT, EACCES). */
  spawnError?: Error;
}

export interface RunCommandOptions {
  args?: string[];
  input?: string;
  env?: NodeJS.ProcessEnv;
  timeoutMs: number;
}

/** Runs `file` and collects its exit status and output; never rejects. */
export function runCommand(file: string, options: RunCommandOptions): Promise<CommandResult> {
  return new Promise((resolve) => {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let timedOut = false;
    let settled = false;
    const finish = (r: Pick<CommandResult, 'exitCode' | 'signal' | 'spawnError'>) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ ...r, timedOut, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') });
    };
    const child = spawnProcess(file, options.args ?? [], { stdio: ['pipe', 'pipe', 'pipe'], env: options.env, detached: true });
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        child.kill('SIGKILL');
      }
      child.once('exit', (exitCode: number | null, signal: NodeJS.Signals | null) => finish({ exitCode, signal }));
    }, options.timeoutMs);
    child.stdout!.on('data', (d: Buffer) => out.push(d));
    child.stderr!.on('data', (d: Buffer) => err.push(d));
    child.once('error', (spawnError: Error) => finish({ exitCode: null, signal: null, spawnError }));
    child.once('close', (exitCode: number | null, signal: NodeJS.Signals | null) => finish({ exitCode, signal }));
    child.stdin!.on('error', () => {}); // a command may exit without reading its input
    child.stdin!.end(options.input ?? '');
  });
}
