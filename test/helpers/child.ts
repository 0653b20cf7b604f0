/** What the helpers that run a server process (registry, Prometheus) share. */
import type { ChildProcess } from 'node:child_process';
import { waitFor } from './wait.js';

/** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has exited. */
export async function stopChild(child: ChildProcess, graceMs = 5000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/**
 * Waits until `ready` says the server answers; fails at once, with its output, if the process exits
 * first, and after `timeoutMs` otherwise.
 */
export async function waitUntilServing(what: string, child: ChildProcess, output: () => string, ready: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  let exited = false;
  try {
    await waitFor(
      what,
      async () => {
        if (child.exitCode !== null || child.signalCode !== null) {
          exited = true;
          return true;
        }
        return (await ready()) ? true : undefined;
      },
      { timeoutMs, intervalMs: 50 },
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}:\n${output()}`);
  }
  if (exited) throw new Error(`${what}: the process exited:\n${output()}`);
}
