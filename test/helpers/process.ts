/** Whether a process is there, for tests that watch processes come and go. */
import { readFile } from 'node:fs/promises';

/** Whether `pid` names a process, a zombie (exited, not yet reaped) included. */
export function pidExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Whether `pid` names a running process: one that exists and is not a zombie. */
export async function pidAlive(pid: number): Promise<boolean> {
  if (!pidExists(pid)) return false;
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  const afterName = stat.lastIndexOf(')');
  return afterName >= 0 && stat[afterName + 2] !== 'Z';
}
