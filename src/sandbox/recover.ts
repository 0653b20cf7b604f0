/**
 * Garbage collection at start-up: what a RunPodSandbox interrupted by a crash left without a record —
 * state dirs (with a shm mount and a pause bundle), runtime containers and their conmon files, netns
 * pins and CNI attachments. Each step is logged and never stops the daemon from starting.
 */
import { readdir, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { messageOf } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import { podFilePaths } from './pod-files.js';
import type { SandboxServiceOptions } from './deps.js';

/** Removes every pod leftover whose sandbox ID is not in `known`. */
export async function collectGarbage(options: SandboxServiceOptions, known: ReadonlySet<string>): Promise<void> {
  const stateRoot = dirname(options.sandboxStateDir('x'));
  for (const id of await readdir(stateRoot).catch(() => [] as string[])) {
    if (!known.has(id)) await removeOrphan(options, id, join(stateRoot, id));
  }
  for (const path of await options.network.listNetns().catch(() => [] as string[])) {
    const id = basename(path);
    if (known.has(id)) continue;
    await step(options.log, id, 'orphan network', async () => {
      await options.network.teardown({ sandboxId: id, netnsPath: path });
      await options.network.removeNetns(path);
    });
  }
  for (const id of await options.network.attachedSandboxes().catch(() => [] as string[])) {
    if (!known.has(id)) await step(options.log, id, 'orphan CNI attachment', () => options.network.teardown({ sandboxId: id, netnsPath: '' }));
  }
}

async function removeOrphan(options: SandboxServiceOptions, id: string, dir: string): Promise<void> {
  options.log.warn('removing what an interrupted RunPodSandbox left', { id });
  // The record that named the handler is what is missing: try each one (unknown IDs are no error).
  for (const handler of options.runtimes.names()) {
    await step(options.log, id, `orphan pause container (${handler})`, async () => void (await options.pause.destroy(id, handler)));
  }
  await step(options.log, id, 'orphan pause files', () => options.pause.forget(id));
  await step(options.log, id, 'orphan pod files', () => options.host.removePodFiles(podFilePaths(dir, false)));
  await step(options.log, id, 'orphan state dir', () => rm(dir, { recursive: true, force: true }));
}

async function step(log: Logger, id: string, what: string, body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (err) {
    log.error('garbage collection step failed', { id, step: what, error: messageOf(err) });
  }
}
