/** Removing a container from its runtime and monitor, tolerating whatever is already gone. */
import { pollUntil } from '../common/poll.js';
import type { Monitor } from '../monitor/monitor.js';
import { isSameProcessAlive, signalProcess } from '../monitor/process.js';
import type { Runc } from '../runtime/runc.js';

/** A conmon process, identified by pid and /proc start time. */
export interface ConmonRef {
  pid: number;
  startTime: bigint;
}

/** How long conmon gets to record the exit and leave once its container is gone. */
const CONMON_EXIT_WAIT_MS = 3000;

/**
 * `runc delete --force` (kills a live process, removes the runtime state and cgroup), waits for conmon
 * to write the exit file and exit (killing it if it lingers), then removes conmon's files outside the
 * bundle, so no exit file appears after the container is forgotten.
 */
export async function destroyRuntimeContainer(monitor: Monitor, runtime: Runc, id: string, conmon: ConmonRef | undefined): Promise<void> {
  await runtime.delete(id, true);
  if (conmon && conmon.pid > 0) {
    const gone = await pollUntil(async () => !(await isSameProcessAlive(conmon.pid, conmon.startTime)), {
      timeoutMs: CONMON_EXIT_WAIT_MS,
      maxIntervalMs: 50,
    });
    if (!gone) signalProcess(conmon.pid, 'SIGKILL');
  }
  await monitor.removeContainerFiles(id);
}
