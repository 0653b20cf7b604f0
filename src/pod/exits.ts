/**
 * Exit routing: conmon writes one exit file per process into one directory; each exit goes to the
 * module that owns the ID.
 */
import { ContainerEventType } from '../gen/runtime/v1/api.js';
import type { SandboxLookup } from '../container/deps.js';
import type { ContainerService } from '../container/service.js';
import type { ExitRecord } from '../monitor/exits.js';

/**
 * Routes one exit file to its owner (a pause container's to the sandbox service, which reports whether
 * the ID is a sandbox; otherwise the container service) and publishes STOPPED for a pod that stopped being ready.
 */
export async function routeExit(
  exit: ExitRecord,
  sandboxes: SandboxLookup & { handleExit(exit: ExitRecord): Promise<boolean> },
  containers: ContainerService,
): Promise<void> {
  const before = sandboxes.find(exit.id);
  if (before?.id === exit.id) {
    await sandboxes.handleExit(exit);
    if (before.state === 'ready' && sandboxes.find(exit.id)?.state === 'notready') {
      containers.emitSandboxEvent(exit.id, ContainerEventType.CONTAINER_STOPPED_EVENT);
    }
    return;
  }
  await containers.handleExit(exit);
}
