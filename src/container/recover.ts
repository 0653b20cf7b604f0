/**
 * Start-up recovery, before the API answers: remove what an interrupted CreateContainer left, load the
 * records, and reconcile each container with its monitor and runtime:
 *
 *   conmon alive  → `runc state`: running stays RUNNING (a start that was in flight counts), created
 *                   stays CREATED, stopped → the exit file conmon wrote
 *   conmon gone   → the exit file it wrote while Stove was down, or exit 255 reason Unknown (then any
 *                   process it left is killed: nobody would log it or record its exit)
 *
 * conmon keeps running while Stove is down, so logs continue and exits land in the exit dir; the
 * daemon starts the exit watcher before this (an exit file that comes before the records are loaded
 * finds no container) and calls `recheckExits` after it to apply such exits.
 */
import { readdir, readFile, rm, access } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { nowNs } from '../common/clock.js';
import { messageOf } from '../common/errors.js';
import { shortId } from '../common/ids.js';
import { unmount } from '../platform/mount.js';
import type { ContainerRecord } from './model.js';
import type { ContainerService } from './service.js';
import type { ContainerServiceOptions } from './deps.js';
import { CONTAINER_RECORD_FILE } from './store.js';
import { removeUnusedLogFile } from './log-file.js';
import { destroyRuntimeContainer, type ConmonRef } from './teardown.js';
import { processStartTime, readPidFile } from '../monitor/process.js';
import { containerOfHolder } from '../images/image-service.js';

/** How long a stopped container's exit file may take to appear (runc reports stopped first). */
const EXIT_FILE_WAIT_MS = 2000;

export interface RecoverySummary {
  total: number;
  running: number;
  created: number;
  exited: number;
  orphans: number;
}

/** Recovers every container; never throws for one container's trouble (it is logged). */
export async function recoverContainers(svc: ContainerService, options: ContainerServiceOptions): Promise<RecoverySummary> {
  const log = options.log.child({ phase: 'recovery' });
  const persistRoot = dirname(options.containerDir('x'));
  // A container whose record is in quarantine is no orphan: its processes, mounts and layer stay.
  const known = new Set([...(await recordIds(persistRoot)), ...svc.store.quarantinedIds()]);
  let orphans = 0;
  const stateRoot = dirname(options.containerStateDir('x'));
  for (const id of await readdir(stateRoot).catch(() => [] as string[])) {
    if (known.has(id)) continue;
    orphans++;
    await step(log, id, 'orphan container', () => removeOrphan(options, id, join(stateRoot, id)));
  }
  // A dir without a record (an interrupted create, also one whose hold was lost) goes in load().
  const records = await svc.store.load(log);
  for (const r of records) {
    // Holds are written without fsync (see ImageService.saveHold): after a power loss the record names the image.
    if (!options.images.heldImage(r.id)) await step(log, r.id, 'hold its image again', () => options.images.holdImage(r.imageId, r.id, r.runtimeHandler));
    await step(log, r.id, 'reconcile container', () => reconcile(svc, options, r));
  }
  const quarantined = svc.store.quarantinedIds();
  for (const id of options.images.holders()) {
    // An image volume's hold belongs to its container, whose removal releases it.
    if (svc.store.get(containerOfHolder(id)) || quarantined.has(containerOfHolder(id))) continue;
    orphans++;
    await step(log, id, 'orphan root filesystem', () => options.images.removeRootfs(id));
  }
  const now = svc.store.list();
  const summary = {
    total: now.length,
    running: now.filter((r) => r.state === 'running').length,
    created: now.filter((r) => r.state === 'created').length,
    exited: now.filter((r) => r.state === 'exited').length,
    orphans,
  };
  log.info('containers recovered', { ...summary });
  return summary;
}

/** Applies exit files of containers still marked live (exits between recovery and the watcher's start). */
export async function recheckExits(svc: ContainerService, options: ContainerServiceOptions): Promise<void> {
  for (const r of svc.store.list()) {
    if (r.state === 'exited') continue;
    const exit = await options.monitor.readExit(r.id).catch(() => undefined);
    if (exit) await svc.handleExit(exit);
  }
}

async function recordIds(persistRoot: string): Promise<Set<string>> {
  const ids = new Set<string>();
  for (const id of await readdir(persistRoot).catch(() => [] as string[])) {
    const has = await access(join(persistRoot, id, CONTAINER_RECORD_FILE)).then(() => true, () => false);
    if (has) ids.add(id);
  }
  return ids;
}

async function reconcile(svc: ContainerService, options: ContainerServiceOptions, r: ContainerRecord): Promise<void> {
  if (r.state === 'exited') return;
  // Created from a checkpoint archive and not started: no monitor, no runtime container yet.
  if (r.state === 'created' && r.restore && r.conmonPid === 0) return;
  const { monitor } = options;
  const runtime = svc.runtimeOf(r);
  if (await monitor.isMonitorAlive(r)) {
    const state = await runtime.state(r.id).catch(() => undefined);
    if (state?.status === 'running' || state?.status === 'paused') {
      if (r.state === 'created') {
        // StartContainer ran `runc start` but Stove stopped before recording it.
        await svc.store.update(r.id, (c) => {
          c.state = 'running';
          c.startedAt = nowNs();
        });
      }
      return;
    }
    if (state?.status === 'created') return;
    await svc.applyExit(r, await monitor.waitForExit(r.id, EXIT_FILE_WAIT_MS));
    return;
  }
  const exit = await monitor.readExit(r.id);
  if (!exit) {
    // Unmonitored: kill whatever is left so a container reported EXITED is not still running.
    await runtime.kill(r.id, 'SIGKILL', r.sharedPidNamespace).catch(() => {});
  }
  await svc.applyExit(r, exit);
}

/**
 * A container dir without a record: an interrupted create. Remove everything it may have made, its
 * log file too (the kubelet, whose CreateContainer failed, would count it as a run: log-file.ts).
 */
async function removeOrphan(options: ContainerServiceOptions, id: string, dir: string): Promise<void> {
  options.log.warn('removing what an interrupted CreateContainer left', { id: shortId(id) });
  await destroyRuntimeContainer(options.monitor, options.runtimes.get(''), id, await conmonOf(dir, id));
  await options.images.removeRootfs(id);
  await unmount(join(dir, 'rootfs'), true);
  const logFile = await removeUnusedLogFile(dir);
  if (logFile) options.log.info('removed the log file of an interrupted CreateContainer', { id: shortId(id), logPath: logFile });
  await rm(dir, { recursive: true, force: true });
}

/** The conmon of a bundle, if its pid file names a live conmon for this container. */
async function conmonOf(bundle: string, id: string): Promise<ConmonRef | undefined> {
  const pid = await readPidFile(join(bundle, 'conmon-pidfile'));
  if (!pid) return undefined;
  const argv = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
  if (!argv.split('\0').includes(id)) return undefined;
  const startTime = await processStartTime(pid);
  return startTime === undefined ? undefined : { pid, startTime };
}

async function step(log: ContainerServiceOptions['log'], id: string, what: string, body: () => Promise<unknown>): Promise<void> {
  try {
    await body();
  } catch (err) {
    log.error('recovery step failed', { id, step: what, error: messageOf(err) });
  }
}
