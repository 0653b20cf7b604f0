/**
 * The pod sandbox service: StopPodSandbox and RemovePodSandbox over the network, the pod files and the
 * pause container (RunPodSandbox is run.ts's SandboxRunner); the lookups the container module and the query RPCs
 * use; the step that marks a pod NOTREADY when its pause process dies; and the recovery that rebuilds
 * everything from disk before the API answers (recover.ts removes what interrupted runs left).
 *
 * Ordering rule: this service holds no lock. Every step that changes a pod (stop, remove, resize, a
 * pause exit, recovery's reconciling) is called only by the pod lifecycle (pod/lifecycle.ts) under its
 * per-pod lock, which is the one lock of a pod; each step re-reads the record it changes. The lookups
 * read the in-memory store and are safe from anywhere.
 */
import { rm } from 'node:fs/promises';
import { LinuxPodSandboxConfig, PodSandboxConfig, type LinuxContainerResources } from '../gen/runtime/v1/api.js';
import { nowNs } from '../common/clock.js';
import { failedPrecondition, wrap } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import type { ExitRecord } from '../monitor/exits.js';
import type { PodNetworkResult } from '../network/pod-network.js';
import { linuxResources, readBundleSpec } from '../oci/index.js';
import type { SandboxServiceOptions } from './deps.js';
import { podConfigOf, type PauseState, type SandboxRecord } from './model.js';
import { pauseRefs } from './pause.js';
import { collectGarbage } from './recover.js';
import { StepTimer } from '../observability/steps.js';
import { podCgroupPath, podLimits } from './resize.js';
import type { SandboxStore } from './store.js';

export class SandboxService {
  private readonly store: SandboxStore;
  private readonly log: Logger;

  constructor(private readonly options: SandboxServiceOptions) {
    this.store = options.store;
    this.log = options.log;
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
    return this.options.network.status(id);
  }

  /** The pause process: running, exited (runtime container still there) or deleted. */
  async pauseState(record: SandboxRecord): Promise<PauseState> {
    if (record.pausePid === 0) return 'deleted';
    return (await this.options.pause.isAlive(record.pausePid, record.pauseStartTime)) ? 'running' : 'stopped';
  }

  /** The pause container's OCI spec as written to its bundle, if it is still there. */
  async pauseSpec(record: SandboxRecord): Promise<unknown> {
    return readBundleSpec(record.bundleDir);
  }

  // ---------------------------------------------------------------------------------------------
  // UpdatePodSandboxResources

  /**
   * Records the pod-level resources in the pod's config and writes the pod's limits (resources plus
   * overhead) into its own cgroup (resize.ts). Absent parts of the request keep what was recorded.
   * NotFound once the pod is gone.
   */
  async updateResources(id: string, overhead: LinuxContainerResources | undefined, resources: LinuxContainerResources | undefined): Promise<SandboxRecord> {
    const record = this.get(id);
    if (record.state !== 'ready') throw failedPrecondition(`sandbox "${id}" is NOTREADY: only a ready pod can be resized`);
    const cgroup = podCgroupPath(record, this.options.defaults);
    const config = podConfigOf(record);
    const linux = config.linux ?? LinuxPodSandboxConfig.fromPartial({});
    const nextOverhead = overhead ?? linux.overhead;
    const nextResources = resources ?? linux.resources;
    const limits = linuxResources(podLimits(nextResources, nextOverhead), this.options.specSettings.cgroups);
    try {
      await this.options.host.writeCgroupLimits(cgroup, limits);
    } catch (err) {
      throw wrap(err, `failed to update resources of sandbox "${id}"`);
    }
    const updated = await this.store.update(id, (r) => {
      r.config = PodSandboxConfig.toJSON({ ...config, linux: { ...linux, overhead: nextOverhead, resources: nextResources } });
      r.resize = { cgroup, limits, at: new Date().toISOString() };
    });
    this.log.info('pod resources updated', { id, cgroup, limits });
    return updated;
  }

  // ---------------------------------------------------------------------------------------------
  // StopPodSandbox and RemovePodSandbox

  /**
   * Stops the pause container and the network (the pod's containers are stopped already). Unknown or
   * stopped: nothing to do.
   */
  async stop(id: string): Promise<void> {
    const timer = new StepTimer(this.options.telemetry);
    const record = this.store.get(id);
    if (!record) return;
    // The pin keeps the netns (and the pod interface) alive without the pause process, so the pause
    // container and the network go at the same time.
    const [pause, network, shm] = await Promise.allSettled([
      timer.time('pause', () => this.stopPause(record)),
      timer.time('network', () => this.stopNetwork(record)),
      timer.time('shm', () => this.options.host.unmountShm(record.files)),
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
    this.log[wasUp ? 'info' : 'debug']('pod sandbox stopped', { id, ms: timer.total(), steps: timer.steps });
  }

  /** Kills and deletes the pause container if it is still there; how it ended, or undefined if it was gone. */
  private async stopPause(record: SandboxRecord): Promise<{ code: number; finishedAt: bigint } | undefined> {
    if (record.pausePid === 0) return undefined;
    const refs = pauseRefs(record.pausePid, record.pauseStartTime, record.conmonPid, record.conmonStartTime);
    const exit = await this.options.pause.destroy(record.id, record.runtimeHandler, refs);
    return exit ? { code: exit.exitCode, finishedAt: exit.finishedAtNs } : { code: 137, finishedAt: nowNs() };
  }

  /** CNI DEL, then the pin: some plugins clean up only while the pod interface exists. Idempotent. */
  private async stopNetwork(record: SandboxRecord): Promise<void> {
    if (!record.netnsPath) return;
    await this.options.network.teardown({ sandboxId: record.id, netnsPath: record.netnsPath });
    await this.options.network.removeNetns(record.netnsPath);
  }

  /** Stops the pod if needed, then removes its files, dirs, cgroups and record (its containers are gone already). */
  async remove(id: string): Promise<void> {
    const record = this.store.get(id);
    if (!record) return;
    await this.stop(record.id);
    try {
      await this.options.pause.forget(record.id);
      await this.options.host.removePodFiles(record.files);
      await rm(record.stateDir, { recursive: true, force: true });
      await this.options.host.removeCgroup(record.cgroupsPath);
      for (const level of this.options.parentUsers.removable(record.cgroupParent, record.createdCgroupParents, { id: record.id })) {
        await this.options.host.removeEmptyCgroup(level);
      }
    } catch (err) {
      throw wrap(err, `failed to remove sandbox "${record.id}"`);
    }
    await this.store.delete(record.id);
    this.store.names.release(record.name, record.id);
    this.log.info('pod sandbox removed', { id: record.id });
  }

  // ---------------------------------------------------------------------------------------------
  // Exits and recovery

  /**
   * Makes a READY pod whose pause process is gone NOTREADY, with `exit` (from conmon's exit dir) or the
   * exit record conmon left. True when the pod changed. A stale exit record from before a restart says
   * nothing about a pause process that still runs.
   */
  async notePauseExit(id: string, exit?: ExitRecord): Promise<boolean> {
    const record = this.store.get(id);
    if (record?.state !== 'ready') return false;
    if (record.pausePid && (await this.options.pause.isAlive(record.pausePid, record.pauseStartTime))) return false;
    const ended = exit ?? (await this.options.pause.readExit(id));
    await this.store.update(id, (r) => {
      r.state = 'notready';
      r.exit = ended ? { code: ended.exitCode, finishedAt: ended.finishedAtNs } : { code: 255, finishedAt: nowNs() };
    });
    this.log.warn('pause process exited: pod sandbox is not ready', { id, exitCode: ended?.exitCode });
    return true;
  }

  /** Loads every record (start-up, before the API answers); returns the pods' IDs. */
  async load(): Promise<string[]> {
    return (await this.store.load(this.log)).map((r) => r.id);
  }

  /**
   * Removes what an interrupted RunPodSandbox left (state dirs, netns pins, CNI attachments, runtime
   * containers without a record). A pod whose record is in quarantine is no orphan: its pause process,
   * netns and IPs stay.
   */
  async collectGarbage(): Promise<void> {
    await collectGarbage(this.options, new Set([...this.store.list().map((r) => r.id), ...this.store.quarantinedIds()]));
    this.log.info('sandboxes recovered', {
      total: this.store.list().length,
      ready: this.store.list().filter((r) => r.state === 'ready').length,
    });
  }
}
