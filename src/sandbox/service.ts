/**
 * The pod sandbox service: RunPodSandbox, StopPodSandbox and RemovePodSandbox as steps over the
 * network, the pod files and the pause container; the exit handler that marks a pod NOTREADY when its
 * pause process dies; and the recovery that rebuilds everything from disk before the API answers.
 *
 * Run order (what may run at the same time is grouped):
 *   validate → reserve name → state dir → { netns pin | pod files + shm | cgroup parent check }
 *            → { CNI ADD | pause create + start } → record written
 * The pause container joins the pinned netns by path, so it does not wait for CNI (unless a sysctl
 * names a pod interface, which must exist first). Every acquisition pushes its undo at once: a failed
 * run leaves nothing behind.
 */
import { mkdir, readdir, readFile, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { PodSandboxConfig } from '../gen/runtime/v1/api.js';
import { withCleanup, type CleanupStack } from '../common/cleanup.js';
import { nowNs } from '../common/clock.js';
import { messageOf, wrap } from '../common/errors.js';
import { newId, shortId } from '../common/ids.js';
import { KeyedMutex } from '../common/locks.js';
import type { Logger } from '../common/logger.js';
import type { ExitRecord } from '../monitor/exits.js';
import type { PodNetworkManager, PodNetworkResult } from '../network/pod-network.js';
import { buildPauseSpec, preparePauseHost, type Spec, type SpecSettings } from '../spec/index.js';
import type { SandboxHost } from './host.js';
import { podConfigOf, type SandboxNamespaces, type SandboxRecord } from './model.js';
import { PAUSE_IMAGE_NAME, type PauseProcess, type PauseRefs, type PauseRuntime } from './pause.js';
import { planPod, type PodDefaults, type PodPlan } from './pod-config.js';
import { podFilePaths, type PodFiles } from './pod-files.js';
import type { PodContainers, SandboxStore } from './store.js';

/** The network operations a pod needs (PodNetworkManager; faked in unit tests). */
export type PodNetwork = Pick<
  PodNetworkManager,
  'createNetns' | 'removeNetns' | 'listNetns' | 'attachedSandboxes' | 'setup' | 'teardown' | 'status'
>;

export interface SandboxServiceOptions {
  store: SandboxStore;
  /** Per-sandbox volatile dir (paths.sandboxStateDir). */
  sandboxStateDir(id: string): string;
  network: PodNetwork;
  pause: PauseRuntime;
  /** Validates a runtime handler name (throws NotFound for an unknown one) and lists them. */
  runtimes: { get(handler: string): unknown; names(): string[] };
  /** Stops and removes the pod's containers (the container module). */
  containers: PodContainers;
  host: SandboxHost;
  specSettings: SpecSettings;
  /** Absolute path of the pause root filesystem. */
  pauseRootfs: string;
  defaults: PodDefaults;
  log: Logger;
}

/** Stands in for the netns path while the spec is validated, before the namespace exists. */
const NETNS_PENDING = '/proc/self/ns/net';

/** Sysctls of a named pod interface (`net.ipv4.conf.eth0.*`) need the interface, so CNI runs first. */
function needsInterface(spec: Spec): boolean {
  return Object.keys(spec.linux?.sysctl ?? {}).some((k) => {
    const m = /^net\.ipv[46]\.(?:conf|neigh)\.([^.]+)\./.exec(k);
    return m !== null && !['all', 'default', 'lo'].includes(m[1]!);
  });
}

/** Runs the tasks together; once all have settled, throws the first failure (in task order). */
async function settleAll<T extends readonly unknown[]>(tasks: { [K in keyof T]: Promise<T[K]> }): Promise<T> {
  const results = await Promise.allSettled(tasks);
  const failed = results.find((r) => r.status === 'rejected');
  if (failed) throw (failed as PromiseRejectedResult).reason;
  return results.map((r) => (r as PromiseFulfilledResult<unknown>).value) as unknown as T;
}

/** Milliseconds per step of a run, for the debug log. */
class StepTimer {
  private readonly started = performance.now();
  readonly steps: Record<string, number> = {};

  async time<T>(name: string, body: () => Promise<T>): Promise<T> {
    const t = performance.now();
    try {
      return await body();
    } finally {
      this.steps[name] = +(performance.now() - t).toFixed(1);
    }
  }

  total(): number {
    return +(performance.now() - this.started).toFixed(1);
  }
}

export class SandboxService {
  private readonly store: SandboxStore;
  private readonly locks = new KeyedMutex();
  private readonly log: Logger;

  constructor(private readonly o: SandboxServiceOptions) {
    this.store = o.store;
    this.log = o.log;
  }

  // ---------------------------------------------------------------------------------------------
  // Lookups (what the container module and the query RPCs use)

  /** The sandbox with this ID or unique ID prefix; NotFound otherwise. */
  get(idOrPrefix: string): SandboxRecord {
    return this.store.resolve(idOrPrefix);
  }

  /** The sandbox with this ID or unique prefix, or undefined. */
  find(idOrPrefix: string): SandboxRecord | undefined {
    return this.store.find(idOrPrefix);
  }

  list(): SandboxRecord[] {
    return this.store.list();
  }

  /** The recorded CNI result of a pod (undefined for host network or once torn down). */
  networkStatus(id: string): Promise<PodNetworkResult | undefined> {
    return this.o.network.status(id);
  }

  /**
   * The record, after checking that the pause process of a READY pod still runs: one that died
   * without an exit record (its conmon was killed too) makes the pod NOTREADY here.
   */
  async refresh(record: SandboxRecord): Promise<SandboxRecord> {
    if (record.state !== 'ready' || (await this.o.pause.isAlive(record.pausePid, record.pauseStartTime))) return record;
    await this.locks.run(record.id, async () => {
      const current = this.store.get(record.id);
      if (current?.state === 'ready' && !(await this.o.pause.isAlive(current.pausePid, current.pauseStartTime))) {
        await this.markExited(current, await this.o.pause.readExit(current.id));
      }
    });
    return this.store.get(record.id) ?? record;
  }

  /** The pause process: running, exited (runtime container still there) or deleted. */
  async pauseState(record: SandboxRecord): Promise<'running' | 'stopped' | 'deleted'> {
    if (record.pausePid === 0) return 'deleted';
    return (await this.o.pause.isAlive(record.pausePid, record.pauseStartTime)) ? 'running' : 'stopped';
  }

  /** The pause container's OCI spec as written to its bundle, if it is still there. */
  async pauseSpec(record: SandboxRecord): Promise<unknown> {
    try {
      return JSON.parse(await readFile(join(record.bundleDir, 'config.json'), 'utf8')) as unknown;
    } catch {
      return undefined;
    }
  }

  // ---------------------------------------------------------------------------------------------
  // RunPodSandbox

  /** Creates and starts a pod sandbox; on failure nothing it made is left. */
  async run(config: PodSandboxConfig, runtimeHandler: string): Promise<SandboxRecord> {
    const timer = new StepTimer();
    this.o.runtimes.get(runtimeHandler);
    const plan = planPod(config, this.o.defaults);
    const { seccompProfiles } = await preparePauseHost(config);
    const id = newId();
    const stateDir = this.o.sandboxStateDir(id);
    const files = podFilePaths(stateDir, plan.modes.hostIpc);
    // The whole spec is built (and so validated) before anything exists; the netns path comes later.
    const spec = buildPauseSpec({
      sandboxId: id,
      config,
      rootPath: this.o.pauseRootfs,
      hostname: plan.hostname,
      netnsPath: plan.modes.hostNetwork ? undefined : NETNS_PENDING,
      shmPath: files.shmPath,
      cgroupParent: plan.cgroupParent,
      imageName: PAUSE_IMAGE_NAME,
      seccompProfiles,
      settings: this.o.specSettings,
    });
    const log = this.log.child({ sandbox: shortId(id), pod: plan.name });
    const record = await this.locks.run(id, () =>
      withCleanup(log, async (cleanup) => {
        this.store.names.reserve(plan.name, id, 'sandbox');
        cleanup.push('release sandbox name', () => this.store.names.release(plan.name, id));
        await mkdir(stateDir, { recursive: true, mode: 0o711 });
        cleanup.push('remove sandbox state dir', () => rm(stateDir, { recursive: true, force: true }));
        await this.createLogDirectory(config.logDirectory, cleanup);

        // Each step starts as soon as what it needs exists: CNI needs the netns; the pause container
        // needs the netns, the pod files and the cgroup cleanup registered (and, for a sysctl naming
        // a pod interface, the interface CNI makes).
        const netns = timer.time('netns', () => this.createNetns(id, plan, cleanup));
        const podFiles = timer.time('podFiles', () => this.setupPodFiles(id, files, plan, config, cleanup));
        const cgroups = timer.time('cgroupParent', () => this.prepareCgroups(spec, plan, cleanup));
        const network = netns.then((netnsPath) => timer.time('cni', () => this.setupNetwork(id, config, plan, netnsPath, cleanup)));
        const bundleDir = join(stateDir, 'bundle');
        const pause = Promise.all([netns, podFiles, cgroups, needsInterface(spec) ? network : undefined]).then(([netnsPath]) => {
          if (netnsPath) setNetnsPath(spec, netnsPath);
          return this.startPause(id, runtimeHandler, bundleDir, spec, cleanup, timer);
        });
        const [netnsPath, , createdCgroups, ips, proc] = await settleAll([netns, podFiles, cgroups, network, pause] as const);

        const created: SandboxRecord = {
          id,
          name: plan.name,
          config: PodSandboxConfig.toJSON(config),
          runtimeHandler,
          createdAt: nowNs(),
          state: 'ready',
          hostname: plan.hostname,
          netnsPath,
          ips,
          cgroupParent: plan.cgroupParent,
          cgroupsPath: spec.linux?.cgroupsPath ?? '',
          createdCgroupParents: createdCgroups,
          pausePid: proc.pid,
          pauseStartTime: proc.pidStartTime,
          conmonPid: proc.conmonPid,
          conmonStartTime: proc.conmonStartTime,
          namespaces: namespacePaths(proc.pid, netnsPath, plan),
          files,
          stateDir,
          bundleDir,
          ...(plan.modes.userns
            ? {
                userns: {
                  uidMappings: plan.modes.uidMappings.map((m) => ({ containerId: m.containerID, hostId: m.hostID, size: m.size })),
                  gidMappings: plan.modes.gidMappings.map((m) => ({ containerId: m.containerID, hostId: m.hostID, size: m.size })),
                },
              }
            : {}),
        };
        await timer.time('record', () => this.store.put(created));
        return created;
      }),
    );
    log.info('pod sandbox ready', { id, ips: record.ips, pausePid: record.pausePid, ms: timer.total(), steps: timer.steps });
    return record;
  }

  private async createLogDirectory(dir: string, cleanup: CleanupStack): Promise<void> {
    if (!dir) return;
    const first = await mkdir(dir, { recursive: true, mode: 0o755 });
    if (first) cleanup.push('remove log directory', () => rm(first, { recursive: true, force: true }));
  }

  /** Pins a new network namespace ('' for host network). */
  private async createNetns(id: string, plan: PodPlan, cleanup: CleanupStack): Promise<string> {
    if (plan.modes.hostNetwork) return '';
    let path: string;
    try {
      path = await this.o.network.createNetns(id);
    } catch (err) {
      throw wrap(err, `failed to create network namespace for sandbox "${id}"`);
    }
    cleanup.push('remove network namespace', () => this.o.network.removeNetns(path));
    return path;
  }

  private async setupPodFiles(id: string, files: PodFiles, plan: PodPlan, config: PodSandboxConfig, cleanup: CleanupStack): Promise<void> {
    cleanup.push('remove pod files', () => this.o.host.removePodFiles(files));
    try {
      await Promise.all([this.o.host.writePodFiles(files, plan.hostname, config.dnsConfig), this.o.host.mountShm(files)]);
    } catch (err) {
      throw wrap(err, `failed to setup sandbox files for sandbox "${id}"`);
    }
  }

  /** Registers the removal of the pause cgroup and of parent levels this pod brings into being. */
  private async prepareCgroups(spec: Spec, plan: PodPlan, cleanup: CleanupStack): Promise<string[]> {
    const missing = await this.o.host.missingCgroupLevels(plan.cgroupParent);
    cleanup.push('remove cgroup parents', () => this.removeCgroupLevels(missing));
    const cgroupsPath = spec.linux?.cgroupsPath;
    if (cgroupsPath) cleanup.push('remove pause cgroup', () => this.o.host.removeCgroup(cgroupsPath));
    return missing;
  }

  private async removeCgroupLevels(levels: readonly string[]): Promise<void> {
    for (const level of levels) await this.o.host.removeEmptyCgroup(level);
  }

  /** CNI ADD into the pinned namespace; the pod IPs, primary first (none for host network). */
  private async setupNetwork(id: string, config: PodSandboxConfig, plan: PodPlan, netnsPath: string, cleanup: CleanupStack): Promise<string[]> {
    if (plan.modes.hostNetwork) return [];
    const meta = config.metadata!;
    // The manager undoes a failed ADD itself; a later failure needs the DEL registered here.
    const result = await this.o.network.setup({
      sandboxId: id,
      netnsPath,
      podName: meta.name,
      podNamespace: meta.namespace,
      podUid: meta.uid,
      portMappings: plan.portMappings,
      annotations: config.annotations,
      dnsConfig: config.dnsConfig,
      cgroupParent: plan.cgroupParent,
    });
    cleanup.push('tear down pod network', () => this.o.network.teardown({ sandboxId: id, netnsPath }));
    return result.ips;
  }

  private async startPause(id: string, handler: string, bundleDir: string, spec: Spec, cleanup: CleanupStack, timer: StepTimer): Promise<PauseProcess> {
    let proc: PauseProcess;
    try {
      proc = await timer.time('pauseCreate', () => this.o.pause.create(id, handler, bundleDir, spec));
    } catch (err) {
      throw wrap(err, `failed to create pause container for sandbox "${id}"`);
    }
    cleanup.push('destroy pause container', async () => {
      await this.o.pause.destroy(id, handler, pauseRefs(proc));
      await this.o.pause.forget(id);
    });
    try {
      await timer.time('pauseStart', () => this.o.pause.start(id, handler));
    } catch (err) {
      throw wrap(err, `failed to start pause container for sandbox "${id}"`);
    }
    return proc;
  }

  // ---------------------------------------------------------------------------------------------
  // StopPodSandbox and RemovePodSandbox

  /** Stops the pod's containers, the pause container and the network. Unknown or stopped: nothing to do. */
  async stop(idOrPrefix: string): Promise<void> {
    const found = this.store.find(idOrPrefix);
    if (!found) return;
    await this.locks.run(found.id, () => this.stopLocked(found.id));
  }

  private async stopLocked(id: string): Promise<void> {
    const timer = new StepTimer();
    const record = this.store.get(id);
    if (!record) return;
    try {
      await timer.time('containers', () => this.o.containers.stopAll(id, 0));
    } catch (err) {
      throw wrap(err, `failed to stop containers of sandbox "${id}"`);
    }
    // The pin keeps the netns (and the pod interface) alive without the pause process, so the pause
    // container and the network go at the same time.
    const [pause, network, shm] = await Promise.allSettled([
      timer.time('pause', () => this.stopPause(record)),
      timer.time('network', () => this.stopNetwork(record)),
      timer.time('shm', () => this.o.host.unmountShm(record.files)),
    ]);
    await this.store.update(id, (r) => {
      if (pause.status === 'fulfilled') {
        r.state = 'notready';
        if (pause.value) {
          r.pausePid = 0;
          r.pauseStartTime = 0n;
          r.exit ??= pause.value;
        }
      }
      if (network.status === 'fulfilled') r.ips = [];
    });
    if (pause.status === 'rejected') throw wrap(pause.reason, `failed to stop pause container for sandbox "${id}"`);
    if (network.status === 'rejected') throw network.reason;
    if (shm.status === 'rejected') throw wrap(shm.reason, `failed to unmount the shm of sandbox "${id}"`);
    const wasUp = record.state === 'ready' || record.pausePid !== 0 || record.ips.length > 0;
    (wasUp ? this.log.info : this.log.debug).call(this.log, 'pod sandbox stopped', { id, ms: timer.total(), steps: timer.steps });
  }

  /** Kills and deletes the pause container if it is still there; how it ended, or undefined if it was gone. */
  private async stopPause(record: SandboxRecord): Promise<{ code: number; finishedAt: bigint } | undefined> {
    if (record.pausePid === 0) return undefined;
    const exit = await this.o.pause.destroy(record.id, record.runtimeHandler, pauseRefs(record));
    return exit ? { code: exit.exitCode, finishedAt: exit.finishedAtNs } : { code: 137, finishedAt: nowNs() };
  }

  /** CNI DEL, then the pin: some plugins clean up only while the pod interface exists. Idempotent. */
  private async stopNetwork(record: SandboxRecord): Promise<void> {
    if (!record.netnsPath) return;
    await this.o.network.teardown({ sandboxId: record.id, netnsPath: record.netnsPath });
    await this.o.network.removeNetns(record.netnsPath);
  }

  /** Stops the pod if needed, then removes its containers, files, dirs, cgroups and record. */
  async remove(idOrPrefix: string): Promise<void> {
    const found = this.store.find(idOrPrefix);
    if (!found) return;
    await this.locks.run(found.id, async () => {
      const record = this.store.get(found.id);
      if (!record) return;
      await this.stopLocked(record.id);
      try {
        await this.o.containers.removeAll(record.id);
      } catch (err) {
        throw wrap(err, `failed to remove containers of sandbox "${record.id}"`);
      }
      try {
        await this.o.pause.forget(record.id);
        await this.o.host.removePodFiles(record.files);
        await rm(record.stateDir, { recursive: true, force: true });
        await this.o.host.removeCgroup(record.cgroupsPath);
        await this.removeCgroupLevels(record.createdCgroupParents);
      } catch (err) {
        throw wrap(err, `failed to remove sandbox "${record.id}"`);
      }
      await this.store.delete(record.id);
      this.store.names.release(record.name, record.id);
      this.log.info('pod sandbox removed', { id: record.id });
    });
  }

  // ---------------------------------------------------------------------------------------------
  // Exits and recovery

  /**
   * Handles an exit record from conmon's exit dir: a pod whose pause process exited becomes NOTREADY.
   * False when the ID is no sandbox (it is a container's).
   */
  async handleExit(exit: ExitRecord): Promise<boolean> {
    if (!this.store.get(exit.id)) return false;
    await this.locks.run(exit.id, async () => {
      const record = this.store.get(exit.id);
      if (!record || record.state !== 'ready') return;
      // A stale record from before a restart says nothing about a pause process that still runs.
      if (record.pausePid && (await this.o.pause.isAlive(record.pausePid, record.pauseStartTime))) return;
      await this.markExited(record, exit);
    });
    return true;
  }

  private async markExited(record: SandboxRecord, exit: ExitRecord | undefined): Promise<void> {
    await this.store.update(record.id, (r) => {
      r.state = 'notready';
      r.exit = exit ? { code: exit.exitCode, finishedAt: exit.finishedAtNs } : { code: 255, finishedAt: nowNs() };
    });
    this.log.warn('pause process exited: pod sandbox is not ready', { id: record.id, exitCode: exit?.exitCode });
  }

  /**
   * Loads every record, marks pods whose pause process died while Stove was down as NOTREADY, and
   * removes what an interrupted RunPodSandbox left (state dirs, netns pins, CNI attachments, runtime
   * containers without a record). Runs before the API answers.
   */
  async recover(): Promise<void> {
    const records = await this.store.load(this.log);
    for (const record of records) {
      if (record.state !== 'ready') continue;
      const alive = record.pausePid > 0 && (await this.o.pause.isAlive(record.pausePid, record.pauseStartTime));
      if (!alive) await this.markExited(record, await this.o.pause.readExit(record.id));
    }
    await this.collectGarbage(new Set(records.map((r) => r.id)));
    this.log.info('sandboxes recovered', {
      total: records.length,
      ready: this.store.list().filter((r) => r.state === 'ready').length,
    });
  }

  private async collectGarbage(known: Set<string>): Promise<void> {
    const stateRoot = dirname(this.o.sandboxStateDir('x'));
    const dirs = await readdir(stateRoot).catch(() => [] as string[]);
    for (const id of dirs.filter((d) => !known.has(d))) {
      await this.removeOrphan(id, join(stateRoot, id));
    }
    for (const path of await this.o.network.listNetns().catch(() => [] as string[])) {
      const id = basename(path);
      if (known.has(id)) continue;
      await this.cleanupStep(id, 'orphan network', async () => {
        await this.o.network.teardown({ sandboxId: id, netnsPath: path });
        await this.o.network.removeNetns(path);
      });
    }
    for (const id of await this.o.network.attachedSandboxes().catch(() => [] as string[])) {
      if (!known.has(id)) await this.cleanupStep(id, 'orphan CNI attachment', () => this.o.network.teardown({ sandboxId: id, netnsPath: '' }));
    }
  }

  private async removeOrphan(id: string, dir: string): Promise<void> {
    this.log.warn('removing what an interrupted RunPodSandbox left', { id });
    for (const handler of this.o.runtimes.names()) {
      await this.cleanupStep(id, `orphan pause container (${handler})`, async () => void (await this.o.pause.destroy(id, handler)));
    }
    await this.cleanupStep(id, 'orphan pause files', () => this.o.pause.forget(id));
    await this.cleanupStep(id, 'orphan pod files', () => this.o.host.removePodFiles(podFilePaths(dir, false)));
    await this.cleanupStep(id, 'orphan state dir', () => rm(dir, { recursive: true, force: true }));
  }

  private async cleanupStep(id: string, what: string, body: () => Promise<void>): Promise<void> {
    try {
      await body();
    } catch (err) {
      this.log.error('garbage collection step failed', { id, step: what, error: messageOf(err) });
    }
  }

  /** The parsed CRI config of a record. */
  configOf(record: SandboxRecord): PodSandboxConfig {
    return podConfigOf(record);
  }
}

/** The pause process and its conmon as recorded. */
function pauseRefs(p: { pid?: number; pausePid?: number; pidStartTime?: bigint; pauseStartTime?: bigint; conmonPid: number; conmonStartTime: bigint }): PauseRefs {
  const pid = p.pid ?? p.pausePid ?? 0;
  const startTime = p.pidStartTime ?? p.pauseStartTime ?? 0n;
  return { pause: pid ? { pid, startTime } : undefined, conmon: { pid: p.conmonPid, startTime: p.conmonStartTime } };
}

/** Replaces the placeholder network namespace path in a pause spec. */
function setNetnsPath(spec: Spec, path: string): void {
  const ns = spec.linux?.namespaces?.find((n) => n.type === 'network');
  if (ns) ns.path = path;
}

/** Where the pod's containers join its namespaces. */
function namespacePaths(pausePid: number, netnsPath: string, plan: PodPlan): SandboxNamespaces {
  const proc = (kind: string) => `/proc/${pausePid}/ns/${kind}`;
  const out: SandboxNamespaces = {};
  if (!plan.modes.hostNetwork) {
    out.network = netnsPath;
    out.uts = proc('uts');
  }
  if (!plan.modes.hostIpc) out.ipc = proc('ipc');
  if (!plan.modes.hostPid) out.pid = proc('pid');
  if (plan.modes.userns) out.user = proc('user');
  return out;
}
