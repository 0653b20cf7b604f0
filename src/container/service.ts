/**
 * The container service: the CRI container lifecycle over conmon and the OCI runtime, exits, events,
 * ExecSync and log reopening. Stats are in stats.ts, recovery in recover.ts, the create steps in
 * create.ts.
 *
 * Concurrency: every change to one container (create's record write, start, stop, remove, update, an
 * exit) runs under that container's lock, so record writes never interleave and events come out in
 * lifecycle order. StopContainer holds the lock while it waits: it watches the exit file itself instead
 * of waiting for the exit handler, which queues behind it and then finds nothing left to do.
 */
import { rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { ImageSpec, LinuxContainerResources, type ContainerConfig, type PodSandboxConfig } from '../gen/runtime/v1/api.js';
import { withCleanup } from '../common/cleanup.js';
import { nowNs } from '../common/clock.js';
import { StoveError, cancelled, failedPrecondition, isKind, messageOf, notFound, wrap } from '../common/errors.js';
import { newId, shortId } from '../common/ids.js';
import { KeyedMutex } from '../common/locks.js';
import { settleAll } from '../common/settle.js';
import { StepTimer } from '../observability/steps.js';
import type { Logger } from '../common/logger.js';
import { writeFileAtomic } from '../persist/atomic-file.js';
import { execProcess } from '../monitor/exec-dir.js';
import { MonitorError } from '../monitor/errors.js';
import { EXEC_SYNC_MAX_OUTPUT, execSync } from '../monitor/exec-sync.js';
import { exitReason, wasOomKilled, type ExitRecord } from '../monitor/exits.js';
import { readOomKills, readParentOomKills, removeCgroup } from '../platform/cgroups.js';
import { RuncError, type Runc } from '../runtime/runc.js';
import { linuxResources, readBundleSpec, specToJson, type Spec } from '../oci/index.js';
import {
  checkRequest,
  stopSignalFor,
  createSteps,
  imageForCreate,
  sandboxForCreate,
  targetPidFor,
  containerNameFor,
  type CreatePlan,
} from './create.js';
import { logPathFor, prepareLogFile } from './log-file.js';
import { podConfigOf } from '../sandbox/model.js';
import type { CheckpointSettings, ContainerServiceOptions, LifecycleEventType } from './deps.js';
import { mergeResources } from './resources.js';
import { containerConfigOf, type ContainerRecord, type ContainerStateName } from './model.js';
import type { ContainerStore } from './store.js';
import { destroyRuntimeContainer } from './teardown.js';
import { DEFAULT_STOP_SIGNAL, runtimeSignalArg } from './stop-signal.js';
import type { CreatedContainer } from '../monitor/conmon.js';
import type { ImageInfo } from '../images/image-service.js';
import type { SandboxRecord } from '../sandbox/model.js';
import type { CheckpointMetadata } from '../checkpoint/archive.js';
import { checkArchivePath, isArchivePath } from '../checkpoint/location.js';
import { checkpointImageLayer, checkpointImageName } from '../checkpoint/image.js';
import { criuImagesOf, removeRestoreDir, restoreDirOf, unpackCheckpoint } from '../checkpoint/restore.js';
import { writeCheckpointArchive } from '../checkpoint/write.js';
import { configDumpOf, containerdStatusOf, restoredConfig } from './checkpoint-convert.js';

/** 128 + SIGKILL: how an OOM kill (or any SIGKILL) shows in an exit code. */
const SIGKILL_EXIT_CODE = 137;

/** Exit code and reason of a container whose start failed (containerd's). */
const START_ERROR_EXIT_CODE = 128;
/** Exit code of a container whose exit was never recorded (conmon died; CRI-O and containerd use 255). */
const UNKNOWN_EXIT_CODE = 255;
const DEFAULT_KILL_TIMEOUT_MS = 30_000;
/** Seconds a CheckpointContainer without a timeout may take. */
const DEFAULT_CHECKPOINT_TIMEOUT_S = 300;
/** How often a stop looks for the exit file besides being woken by the exit watcher. */
const EXIT_POLL_MS = 50;
/** Room left under the 16 MiB gRPC message limit for the truncation note and framing. */
const TRUNCATION_NOTE = `\n[stove: output truncated: the command wrote more than ${EXEC_SYNC_MAX_OUTPUT} bytes]\n`;

/** The result of an ExecSync. */
export interface ExecSyncOutput {
  stdout: Buffer;
  stderr: Buffer;
  exitCode: number;
}

/** What the streaming server needs to exec into or attach to a container. */
export interface ExecTarget {
  id: string;
  runtime: Runc;
  /** The container's process spec, the template for an exec. */
  process: Record<string, unknown>;
  tty: boolean;
  stdin: boolean;
  stdinOnce: boolean;
  state: ContainerStateName;
}

/** Where a restore's checkpoint comes from: an archive file or a checkpoint image's one layer. */
interface CheckpointSource {
  /** The tar (compressed or not) to unpack. */
  tar: string;
  /** As the request named it (the archive's path or the image): the record's `restore.archive`. */
  origin: string;
  /** For messages: `checkpoint archive <path>` or `checkpoint image "<name>"`. */
  what: string;
}

export class ContainerService {
  readonly store: ContainerStore;
  private readonly locks = new KeyedMutex();
  private readonly exitWaiters = new Map<string, Set<() => void>>();
  private readonly log: Logger;
  /** `runtime.log_size_max`, which a reload replaces (the options stay as given). */
  private logSizeMax: number | undefined;

  constructor(private readonly options: ContainerServiceOptions) {
    this.store = options.store;
    this.log = options.log;
    this.logSizeMax = options.logSizeMax;
  }

  /** A config reload's `runtime.log_size_max`: for containers created from now on. */
  setLogSizeMax(bytes: number): void {
    this.logSizeMax = bytes;
  }

  // ---------------------------------------------------------------------------------------------
  // Lookups

  /** The container with this ID or unique ID prefix; NotFound otherwise. */
  get(idOrPrefix: string): ContainerRecord {
    return this.store.resolve(idOrPrefix);
  }

  find(idOrPrefix: string): ContainerRecord | undefined {
    return this.store.find(idOrPrefix);
  }

  list(): ContainerRecord[] {
    return this.store.list();
  }

  /** The containers of one pod. */
  ofSandbox(sandboxId: string): ContainerRecord[] {
    return this.store.ofSandbox(sandboxId);
  }

  /** The runtime a container runs under. */
  runtimeOf(record: Pick<ContainerRecord, 'runtimeHandler'>): Runc {
    return this.options.runtimes.get(record.runtimeHandler);
  }

  /** What an exec or attach needs; NotFound for an unknown container. */
  execTarget(idOrPrefix: string): ExecTarget {
    const r = this.get(idOrPrefix);
    const config = containerConfigOf(r);
    return { id: r.id, runtime: this.runtimeOf(r), process: r.process, tty: config.tty, stdin: config.stdin, stdinOnce: config.stdinOnce, state: r.state };
  }

  /** The OCI spec in the container's bundle, if the bundle is still there. */
  async specOf(record: ContainerRecord): Promise<Spec | undefined> {
    return readBundleSpec(record.bundleDir);
  }

  // ---------------------------------------------------------------------------------------------
  // CreateContainer

  /**
   * Creates a container in a ready sandbox; on failure nothing it made is left. An image that is a
   * path names a checkpoint archive to restore (CRI-O's rule), and a checkpoint image is restored
   * too: see createRestored.
   */
  async create(podSandboxId: string, config: ContainerConfig, requestPodConfig?: PodSandboxConfig, signal?: AbortSignal): Promise<ContainerRecord> {
    const sandbox = sandboxForCreate(this.options, podSandboxId);
    const podConfig = sandbox.config ? podConfigOf(sandbox) : requestPodConfig!;
    const imageName = config.image!.image;
    if (isArchivePath(imageName)) return this.createRestored(sandbox, podConfig, config, await this.archiveSource(imageName));
    checkRequest(config, podConfig);
    const image = imageForCreate(this.options, imageName, sandbox.runtimeHandler);
    // A kubelet names the image by ID and says what the pod spec named in user_specified_image.
    const checkpoint = await this.checkpointImageSource(image, config.image!.userSpecifiedImage || imageName, sandbox.runtimeHandler);
    if (checkpoint) return this.createRestored(sandbox, podConfig, config, checkpoint);
    return this.createFromPlan(this.planFor(newId(), sandbox, podConfig, config, image, imageName), signal);
  }

  /** A checkpoint archive a request names by path, checked against the allowed directories. */
  private async archiveSource(path: string): Promise<CheckpointSource> {
    const settings = this.checkpointSettings('restore a container from a checkpoint archive');
    const tar = await checkArchivePath(path, settings.dirs, 'config.image.image', 'read');
    return { tar, origin: path, what: `checkpoint archive ${tar}` };
  }

  /** The checkpoint a pulled image holds when its manifest marks it as a checkpoint image (checkpoint/image.ts). */
  private async checkpointImageSource(image: ImageInfo, imageName: string, runtimeHandler: string): Promise<CheckpointSource | undefined> {
    const facts = await this.options.images.manifestFacts(image.id, runtimeHandler);
    if (checkpointImageName(facts.annotations) === undefined) return undefined;
    this.checkpointSettings(`restore a container from checkpoint image "${imageName}"`);
    return { tar: checkpointImageLayer(imageName, facts.layerBlobs), origin: imageName, what: `checkpoint image "${imageName}"` };
  }

  private planFor(id: string, sandbox: SandboxRecord, podConfig: PodSandboxConfig, config: ContainerConfig, image: ImageInfo, imageName: string): CreatePlan {
    return {
      id,
      name: containerNameFor(config, podConfig),
      sandbox,
      podConfig,
      config: withImageStoreHandler(config, this.options.images.hasOwnStore(sandbox.runtimeHandler) ? sandbox.runtimeHandler : ''),
      image,
      imageName,
      runtime: this.options.runtimes.get(sandbox.runtimeHandler),
      logPath: logPathFor(podConfig, config),
      targetPid: targetPidFor((c) => this.store.find(c), config, sandbox.id),
      stopSignal: stopSignalFor(config, image, sandbox.id),
      logSizeMax: this.logSizeMax,
    };
  }

  /**
   * `signal` aborted (the client left, or its deadline passed) before the container is made: it is
   * removed again as after a failure, CANCELLED. A kubelet that never got the answer (killed, or timed
   * out) would otherwise find a CREATED container on its next sync and replace it with attempt 1,
   * counting a restart of a container that never ran; without it, its retry is attempt 0 again.
   */
  private async createFromPlan(plan: CreatePlan, signal?: AbortSignal): Promise<ContainerRecord> {
    const started = performance.now();
    const { id, name, config, sandbox } = plan;
    const log = this.log.child({ container: shortId(id), name });
    const timer = new StepTimer(this.options.telemetry);
    const record = await this.locks.run(id, () =>
      withCleanup(log, async (cleanup) => {
        this.store.names.reserve(name, id, 'container');
        cleanup.push('release container name', () => this.store.names.release(name, id));
        const created = await createSteps(this.options, plan, cleanup, timer);
        cleanup.push('forget record', () => this.store.delete(id));
        if (signal?.aborted) throw cancelled('the client left (or its deadline passed) before the container was created: removed again');
        this.emit('created', created);
        return created;
      }),
    ).catch((err: unknown) => {
      throw wrap(err, `failed to create container "${config.metadata?.name}" in sandbox "${sandbox.id}"`);
    });
    const ms = performance.now() - started;
    this.options.telemetry.metrics.containerCreated(id, ms / 1000);
    log.info('container created', { id, sandbox: sandbox.id, image: plan.imageName, ms: +ms.toFixed(1), steps: timer.steps, ...(plan.restore ? { restoreFrom: plan.restore.archive } : {}) });
    return record;
  }

  /**
   * CreateContainer from a checkpoint archive or image (CRI-O's CRImportCheckpoint): the archive (the image's layer) is unpacked
   * into the new container's dir, the container is created from the image the checkpoint was made on
   * with the request's config and the checkpointed process (restore.ts), its writable layer gets the
   * checkpointed changes; StartContainer then restores the process.
   */
  private async createRestored(sandbox: SandboxRecord, podConfig: PodSandboxConfig, requested: ContainerConfig, source: CheckpointSource): Promise<ContainerRecord> {
    const settings = this.checkpointSettings(`restore a container from ${source.what}`);
    if (sandbox.userns) throw failedPrecondition(`sandbox "${sandbox.id}" has its own user namespace: restoring a checkpoint into it is not supported`);
    const id = newId();
    const persistDir = this.options.containerDir(id);
    const dir = restoreDirOf(persistDir);
    try {
      const metadata = await unpackCheckpoint(source.tar, dir, (p, d, policy) => this.options.images.unpackArchive(p, d, policy));
      const config = restoredConfig(requested, metadata);
      checkRequest(config, podConfig);
      const { image, imageName } = this.checkpointImage(metadata, source.what, sandbox.runtimeHandler);
      const plan = this.planFor(id, sandbox, podConfig, config, image, imageName);
      // CRIU is asked for once every part of the archive passed its checks (createSteps), so that a
      // hostile archive is refused as such on any node.
      const requireCriu = () => settings.criu.require(`restore a container from ${source.what}`);
      return await this.createFromPlan({ ...plan, restore: { archive: source.origin, dir, metadata, requireCriu } });
    } catch (err) {
      await rm(persistDir, { recursive: true, force: true });
      throw wrap(err, `failed to create container "${requested.metadata?.name}" from ${source.what}`);
    }
  }

  /**
   * The image a checkpoint was made on, in the store of the pod's runtime handler (it must be there:
   * pull it first), by ID, then by name.
   */
  private checkpointImage(metadata: CheckpointMetadata, source: string, runtimeHandler: string): { image: ImageInfo; imageName: string } {
    const { rootfsImageRef, rootfsImageName, rootfsImage } = metadata.config;
    const imageName = rootfsImageName || rootfsImage || rootfsImageRef!;
    for (const candidate of [rootfsImageRef, rootfsImageName, rootfsImage]) {
      if (!candidate) continue;
      try {
        return { image: this.options.images.getImage(candidate, runtimeHandler), imageName };
      } catch (err) {
        if (!isKind(err, 'NotFound')) throw err;
      }
    }
    throw notFound(`image "${imageName}" (${rootfsImageRef ?? 'no ID recorded'}), which ${source} was made on, is not present: pull it before restoring`);
  }

  private checkpointSettings(what: string): CheckpointSettings {
    const settings = this.options.checkpoint;
    if (!settings) throw failedPrecondition(`cannot ${what}: checkpoint and restore are not set up in this daemon`);
    return settings;
  }

  // ---------------------------------------------------------------------------------------------
  // StartContainer

  /** Runs the process of a CREATED container. */
  async start(idOrPrefix: string): Promise<void> {
    const { id } = this.get(idOrPrefix);
    await this.locks.run(id, async () => {
      const r = this.get(id);
      if (r.state !== 'created') {
        throw failedPrecondition(`container "${id}" is ${r.state.toUpperCase()}: only a CREATED container can be started`);
      }
      const runtime = this.runtimeOf(r);
      const started = performance.now();
      await this.options.lifecycle?.starting(r);
      const parentOomKills = r.cgroupsPath ? await readParentOomKills(this.options.cgroups, r.cgroupsPath).catch(() => undefined) : undefined;
      let restored: CreatedContainer | undefined;
      try {
        if (r.restore) restored = await this.restoreProcess(r, runtime);
        else await runtime.start(id);
      } catch (err) {
        await this.markStartFailed(r, runtime, err);
        throw wrap(err, r.restore ? `failed to restore container "${id}" from checkpoint ${r.restore.archive}` : `failed to start container "${id}"`);
      }
      // Without fsync: a killed daemon's write stays in the page cache (and recovery takes a CREATED
      // container that its runtime runs as started, recover.ts); a power loss ends the container anyway.
      const updated = await this.store.update(
        id,
        (c) => {
          c.state = 'running';
          c.startedAt = nowNs();
          if (parentOomKills !== undefined) c.parentOomKillsAtStart = parentOomKills;
          if (restored) Object.assign(c, restored);
        },
        // A restore's new pids must survive a daemon crash: the record is the only place they are.
        { durable: restored !== undefined },
      );
      if (restored) await removeRestoreDir(r.persistDir).catch((err: unknown) => this.log.warn('cannot remove an unpacked checkpoint archive', { id: shortId(id), error: messageOf(err) }));
      this.emit('started', updated);
      const ms = performance.now() - started;
      this.options.telemetry.metrics.containerStarted(id, ms / 1000);
      this.log.info(restored ? 'container restored' : 'container started', { id: shortId(id), pid: updated.pid, ms: +ms.toFixed(1) });
    });
  }

  /** `runc restore --detach` under a new conmon, from the CRIU images CreateContainer unpacked. */
  private async restoreProcess(r: ContainerRecord, runtime: Runc): Promise<CreatedContainer> {
    await this.checkpointSettings('restore a container').criu.require('restore a container');
    const config = containerConfigOf(r);
    return this.options.monitor.createContainer(runtime, {
      id: r.id,
      name: r.name,
      bundle: r.bundleDir,
      persistDir: r.persistDir,
      logPath: r.logPath || undefined,
      logSizeMax: this.logSizeMax,
      tty: config.tty,
      stdin: config.stdin,
      stdinOnce: config.stdinOnce,
      restorePath: criuImagesOf(restoreDirOf(r.persistDir)),
    });
  }

  private async markStartFailed(r: ContainerRecord, runtime: Runc, err: unknown): Promise<void> {
    await runtime.delete(r.id, true).catch((e: unknown) => this.log.warn('cannot delete a container that failed to start', { id: r.id, error: messageOf(e) }));
    const updated = await this.store.update(r.id, (c) => {
      c.state = 'exited';
      c.finishedAt = nowNs();
      c.exitCode = START_ERROR_EXIT_CODE;
      c.reason = 'StartError';
      c.message = messageOf(err);
      c.pid = 0;
    });
    this.emit('stopped', updated);
  }

  // ---------------------------------------------------------------------------------------------
  // CheckpointContainer

  /**
   * Writes a checkpoint archive of a running container to `location` (checkpoint/write.ts), leaving
   * it running, within `timeoutSeconds` (0: DEFAULT_CHECKPOINT_TIMEOUT_S).
   */
  async checkpoint(idOrPrefix: string, location: string, timeoutSeconds: number): Promise<void> {
    const deadline = Date.now() + (timeoutSeconds > 0 ? timeoutSeconds : DEFAULT_CHECKPOINT_TIMEOUT_S) * 1000;
    const settings = this.checkpointSettings('checkpoint a container');
    const { id } = this.get(idOrPrefix);
    const target = await checkArchivePath(location, settings.dirs, 'location', 'write');
    await this.locks.run(id, async () => {
      const r = this.get(id);
      if (r.state !== 'running') throw failedPrecondition(`container "${id}" is ${r.state.toUpperCase()}: only a running container can be checkpointed`);
      await settings.criu.require('checkpoint a container');
      const spec = await this.specOf(r);
      const started = performance.now();
      try {
        await writeCheckpointArchive({
          id,
          runtime: this.runtimeOf(r),
          bundleDir: r.bundleDir,
          upperDir: this.options.images.upperDirOf(id),
          logPath: r.logPath,
          workDir: join(r.persistDir, 'checkpoint-work'),
          target,
          deadline,
          configDump: configDumpOf(r, settings.runtimeName),
          status: containerdStatusOf(r),
          mountPoints: (spec?.mounts ?? []).map((m) => m.destination),
          log: this.log,
        });
      } catch (err) {
        // The runtime's and the archive writer's errors name the container already.
        throw messageOf(err).includes(id) ? err : wrap(err, `failed to checkpoint container "${id}"`);
      }
      this.log.info('container checkpointed', { id: shortId(id), location: target, ms: +(performance.now() - started).toFixed(1) });
    });
  }

  // ---------------------------------------------------------------------------------------------
  // StopContainer

  /**
   * Sends the container's stop signal (stop-signal.ts), then SIGKILL once `timeoutSeconds` pass, and
   * returns when the container has exited. An unknown or not running container is already stopped.
   */
  async stop(idOrPrefix: string, timeoutSeconds: number): Promise<void> {
    const found = this.store.find(idOrPrefix);
    if (!found) return;
    await this.locks.run(found.id, () => this.stopLocked(found.id, timeoutSeconds));
  }

  private async stopLocked(id: string, timeoutSeconds: number): Promise<void> {
    const r = this.store.get(id);
    if (!r || r.state !== 'running') return;
    const runtime = this.runtimeOf(r);
    const log = this.log.child({ container: shortId(id) });
    if (timeoutSeconds > 0) {
      const signal = r.stopSignal || DEFAULT_STOP_SIGNAL;
      await this.kill(runtime, id, runtimeSignalArg(signal), false);
      if (await this.awaitExit(id, timeoutSeconds * 1000)) {
        log.info('container stopped', { signal });
        return;
      }
      log.info('container ignored its stop signal; killing it', { signal, timeoutSeconds });
    }
    await this.kill(runtime, id, 'SIGKILL', r.sharedPidNamespace);
    const killWait = this.options.killTimeoutMs ?? DEFAULT_KILL_TIMEOUT_MS;
    if (!(await this.awaitExit(id, killWait))) {
      throw new StoveError('DeadlineExceeded', `failed to stop container "${id}": it did not exit within ${killWait} ms of SIGKILL`);
    }
    log.info('container killed');
  }

  /** `runc kill`; a container that is already gone or stopped is fine (its exit is on the way). */
  private async kill(runtime: Runc, id: string, signal: string, all: boolean): Promise<void> {
    try {
      await runtime.kill(id, signal, all);
    } catch (err) {
      if (err instanceof RuncError && (err.kind === 'NotFound' || err.kind === 'FailedPrecondition')) return;
      throw wrap(err, `failed to stop container "${id}"`);
    }
  }

  /**
   * Waits up to `timeoutMs` for the container's exit, applying it when it comes (the caller holds the
   * lock). True once the container is EXITED.
   */
  private async awaitExit(id: string, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    let lastMonitorCheck = Date.now();
    for (;;) {
      const r = this.store.get(id);
      if (!r || r.state === 'exited') return true;
      const exit = await this.options.monitor.readExit(id);
      if (exit) {
        await this.applyExit(r, exit);
        return true;
      }
      if (Date.now() - lastMonitorCheck > 1000) {
        lastMonitorCheck = Date.now();
        // No conmon, no exit file ever: the exit cannot be known.
        if (!(await this.options.monitor.isMonitorAlive(r)) && !(await this.options.monitor.readExit(id))) {
          await this.applyExit(r, undefined);
          return true;
        }
      }
      const left = deadline - Date.now();
      if (left <= 0) return false;
      await this.exitSignal(id, Math.min(left, EXIT_POLL_MS));
    }
  }

  /** Resolves after `ms`, or earlier when the exit watcher reports this container. */
  private exitSignal(id: string, ms: number): Promise<void> {
    return new Promise((resolve) => {
      let waiters = this.exitWaiters.get(id);
      if (!waiters) this.exitWaiters.set(id, (waiters = new Set()));
      const done = () => {
        clearTimeout(timer);
        waiters!.delete(done);
        if (waiters!.size === 0 && this.exitWaiters.get(id) === waiters) this.exitWaiters.delete(id);
        resolve();
      };
      const timer = setTimeout(done, ms);
      waiters.add(done);
    });
  }

  // ---------------------------------------------------------------------------------------------
  // Exits

  /**
   * Handles an exit file from conmon's exit dir. False when the ID is no container of this service
   * (e.g. a pause container's).
   */
  async handleExit(exit: ExitRecord): Promise<boolean> {
    if (!this.store.get(exit.id)) return false;
    for (const wake of this.exitWaiters.get(exit.id) ?? []) wake();
    await this.locks.run(exit.id, async () => {
      const r = this.store.get(exit.id);
      if (r && r.state !== 'exited') await this.applyExit(r, exit);
    });
    return true;
  }

  /** Records an exit (or, without one, exit 255 reason Unknown). The caller holds the lock. */
  async applyExit(r: ContainerRecord, exit: ExitRecord | undefined): Promise<ContainerRecord> {
    if (r.state === 'exited') return r;
    const oom = exit ? await this.wasOomKilled(r, exit.exitCode) : false;
    const updated = await this.store.update(r.id, (c) => {
      c.state = 'exited';
      c.pid = 0;
      if (exit) {
        c.exitCode = exit.exitCode;
        c.finishedAt = exit.finishedAtNs;
        c.reason = exitReason(exit.exitCode, oom);
        c.message = oom ? 'the container was killed by the kernel because its memory limit was reached' : '';
      } else {
        c.exitCode = UNKNOWN_EXIT_CODE;
        c.finishedAt = nowNs();
        c.reason = 'Unknown';
        c.message = 'the container monitor (conmon) is gone and recorded no exit';
      }
      // A process that died before the start was recorded still finished after it began.
      if (c.startedAt > c.finishedAt) c.startedAt = c.finishedAt;
    });
    if (oom) this.options.telemetry.metrics.containerOom();
    this.log.info('container exited', { id: shortId(r.id), exitCode: updated.exitCode, reason: updated.reason });
    this.emit('stopped', updated);
    return updated;
  }

  /** conmon's oom file, or the cgroup's OOM kill counter (conmon misses some kills on cgroup v1). */
  private async wasOomKilled(r: ContainerRecord, exitCode: number): Promise<boolean> {
    if (await wasOomKilled(r.persistDir, r.bundleDir)) return true;
    if (!r.cgroupsPath) return false;
    const kills = await readOomKills(this.options.cgroups, r.cgroupsPath).catch(() => undefined);
    if (kills !== undefined) return kills > 0n;
    // The container's cgroup is gone (systemd removes a scope once it is empty), and conmon, which
    // exits with its container, may not have handled the memory.events change before it did. A kill
    // by SIGKILL while the pod's count of OOM kills grew was one (another container of the pod killed
    // by the OOM killer at the same moment would be taken for it).
    if (exitCode !== SIGKILL_EXIT_CODE || r.parentOomKillsAtStart === undefined) return false;
    const parentKills = await readParentOomKills(this.options.cgroups, r.cgroupsPath).catch(() => undefined);
    return parentKills !== undefined && parentKills > r.parentOomKillsAtStart;
  }

  // ---------------------------------------------------------------------------------------------
  // RemoveContainer

  /** Kills a running container, then deletes everything of it. Unknown: nothing to do. */
  async remove(idOrPrefix: string): Promise<void> {
    const found = this.store.find(idOrPrefix);
    if (!found) return;
    await this.locks.run(found.id, async () => {
      const r = this.store.get(found.id);
      if (!r) return;
      if (r.state === 'running') await this.stopLocked(r.id, 0);
      try {
        await this.removeResources(r);
      } catch (err) {
        throw wrap(err, `failed to remove container "${r.id}"`);
      }
      await this.store.delete(r.id);
      this.store.names.release(r.name, r.id);
      this.emit('deleted', r, true);
      this.log.info('container removed', { id: shortId(r.id) });
    });
  }

  /** Runtime container, monitor files, root filesystem, bundle and cgroup; each step tolerates absence. */
  private async removeResources(r: ContainerRecord): Promise<void> {
    await destroyRuntimeContainer(this.options.monitor, this.runtimeOf(r), r.id, { pid: r.conmonPid, startTime: r.conmonStartTime });
    // Independent once no process is left: the root filesystem (then the bundle holding its mount point) and the cgroup.
    await Promise.all([
      this.options.images.removeRootfs(r.id).then(() => rm(r.bundleDir, { recursive: true, force: true })),
      r.cgroupsPath ? removeCgroup(this.options.cgroups, r.cgroupsPath) : undefined,
    ]);
  }

  // ---------------------------------------------------------------------------------------------
  // Pod operations (pod/lifecycle.ts's PodContainers)

  /** Stops every running container of a sandbox. */
  async stopAll(sandboxId: string, timeoutSeconds: number): Promise<void> {
    await settleAll(this.store.ofSandbox(sandboxId).map((r) => this.stop(r.id, timeoutSeconds)));
  }

  /** Removes every container of a sandbox. */
  async removeAll(sandboxId: string): Promise<void> {
    await settleAll(this.store.ofSandbox(sandboxId).map((r) => this.remove(r.id)));
  }

  // ---------------------------------------------------------------------------------------------
  // UpdateContainerResources, ReopenContainerLog, ExecSync

  /** Applies new resources with `runc update` and records them (in the record and the bundle's spec). */
  async updateResources(idOrPrefix: string, requested: LinuxContainerResources | undefined, opts: { fromExtension?: boolean } = {}): Promise<void> {
    const { id } = this.get(idOrPrefix);
    await this.locks.run(id, async () => {
      const r = this.get(id);
      if (r.state === 'exited') throw failedPrecondition(`container "${id}" is EXITED: cannot update its resources`);
      const current = r.resources ? LinuxContainerResources.fromJSON(r.resources) : undefined;
      let merged = mergeResources(current, requested);
      // An update an extension asked for is not shown to the extensions again.
      if (this.options.lifecycle && !opts.fromExtension) merged = mergeResources(current, await this.options.lifecycle.updating(r, merged));
      const body = linuxResources(merged, this.options.specSettings.cgroups);
      try {
        await this.runtimeOf(r).update(id, body);
      } catch (err) {
        throw wrap(err, `failed to update resources of container "${id}"`);
      }
      await this.store.update(id, (c) => void (c.resources = LinuxContainerResources.toJSON(merged)));
      const spec = await this.specOf(r);
      if (spec) {
        spec.linux ??= {};
        spec.linux.resources = { ...(spec.linux.resources ?? {}), ...body };
        await writeFileAtomic(join(r.bundleDir, 'config.json'), specToJson(spec), 0o600);
      }
      this.log.info('container resources updated', { id: shortId(id), resources: body });
      if (!opts.fromExtension) this.options.lifecycle?.containerEvent('updated', this.get(id));
    });
  }

  /** Makes conmon reopen the container's log; returns once the new file exists. */
  async reopenLog(idOrPrefix: string): Promise<void> {
    const r = this.get(idOrPrefix);
    if (r.state !== 'running') throw failedPrecondition(`container "${r.id}" is not running (${r.state.toUpperCase()}): cannot reopen its log`);
    if (!r.logPath) throw failedPrecondition(`container "${r.id}" has no log path`);
    try {
      // conmon reopens the path by name: the new file is made here first, no symlink followed.
      const sandbox = this.options.sandboxes.find(r.sandboxId);
      await prepareLogFile((sandbox && podConfigOf(sandbox).logDirectory) || dirname(r.logPath), r.logPath);
      await this.options.monitor.reopenLog(r.id, r.logPath);
    } catch (err) {
      throw wrap(err, `failed to reopen the log of container "${r.id}"`);
    }
  }

  /**
   * Runs `cmd` in a running container with its process settings (user, env, cwd, capabilities) and
   * returns the output (at most 16 MiB together; a truncation is noted at the end of stderr). A timeout
   * kills the command and is DEADLINE_EXCEEDED; so does `signal` (the caller left), as CANCELLED.
   */
  async execSync(idOrPrefix: string, cmd: string[], timeoutSeconds: number, signal?: AbortSignal): Promise<ExecSyncOutput> {
    const r = this.get(idOrPrefix);
    if (r.state !== 'running') throw failedPrecondition(`container "${r.id}" is not running (${r.state.toUpperCase()}): cannot exec in it`);
    const proc = execProcess(r.process, cmd, false);
    let result;
    try {
      result = await execSync(this.options.monitor.config, this.runtimeOf(r), r.id, proc, timeoutSeconds, { name: r.name, signal });
      this.options.telemetry.metrics.execSync(result.exitCode === 0 ? 'ok' : 'nonzero_exit');
    } catch (err) {
      this.options.telemetry.metrics.execSync(isKind(err, 'DeadlineExceeded') ? 'timeout' : 'error');
      if (isKind(err, 'DeadlineExceeded')) {
        throw new StoveError('DeadlineExceeded', `command ${JSON.stringify(cmd.join(' '))} in container "${r.id}" timed out after ${timeoutSeconds}s`, { cause: err });
      }
      const now = this.store.get(r.id);
      if (!now || now.state !== 'running') throw failedPrecondition(`container "${r.id}" stopped while the command ran: ${messageOf(err)}`, err);
      // The monitor's errors already say `failed to exec in container "<id>"`.
      throw err instanceof MonitorError ? err : wrap(err, `failed to exec in container "${r.id}"`);
    }
    if (!result.truncated) return { stdout: result.stdout, stderr: result.stderr, exitCode: result.exitCode };
    return { ...capOutput(result.stdout, result.stderr), exitCode: result.exitCode };
  }

  /** Publishes a lifecycle event of this container (pod/events.ts). */
  private emit(type: LifecycleEventType, record: ContainerRecord, deleted = false): void {
    this.options.events.container(type, record, deleted);
  }
}

/** Cuts output so that it and the truncation note fit the limit, and appends the note to stderr. */
export function capOutput(stdout: Buffer, stderr: Buffer): { stdout: Buffer; stderr: Buffer } {
  const note = Buffer.from(TRUNCATION_NOTE);
  const room = EXEC_SYNC_MAX_OUTPUT - 64 * 1024 - note.length;
  const out = stdout.subarray(0, Math.min(stdout.length, room));
  const err = stderr.subarray(0, Math.max(0, Math.min(stderr.length, room - out.length)));
  return { stdout: out, stderr: Buffer.concat([err, note]) };
}

/**
 * The config as recorded: its image spec names the runtime handler whose own store holds the image ('':
 * the shared store), as ListImages reports that image, so that the kubelet's image GC (which keys images
 * by ID and handler, and containers' images by `Container.image.runtime_handler`) sees it in use.
 */
function withImageStoreHandler(config: ContainerConfig, runtimeHandler: string): ContainerConfig {
  if ((config.image?.runtimeHandler ?? '') === runtimeHandler) return config;
  return { ...config, image: ImageSpec.fromPartial({ ...config.image, runtimeHandler }) };
}
