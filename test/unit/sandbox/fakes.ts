/**
 * Fakes for the sandbox service's collaborators: a network, a pause runtime, a host and pod
 * containers that record every call and can be told to fail, so the service's ordering, cleanup and
 * recovery rules are tested without root.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { internal, notFound } from '../../../src/common/errors.js';
import { silentLogger } from '../../../src/common/logger.js';
import { NO_TELEMETRY } from '../../../src/observability/hooks.js';
import type { LifecycleEventType } from '../../../src/container/deps.js';
import type { ExitRecord } from '../../../src/monitor/exits.js';
import type { PodNetworkRequest, PodNetworkResult, PodNetworkRef } from '../../../src/network/pod-network.js';
import type { SandboxHost } from '../../../src/sandbox/host.js';
import type { PauseProcess, PauseRefs, PauseRuntime } from '../../../src/sandbox/pause.js';
import type { PodFiles } from '../../../src/sandbox/pod-files.js';
import type { PodNetwork, SandboxServiceOptions } from '../../../src/sandbox/deps.js';
import { SandboxService } from '../../../src/sandbox/service.js';
import { SandboxRunner } from '../../../src/sandbox/run.js';
import { CgroupParentUsers } from '../../../src/sandbox/cgroup-parents.js';
import { SandboxStore } from '../../../src/sandbox/store.js';
import { PodLifecycle, type PodContainers } from '../../../src/pod/lifecycle.js';
import type { ContainerRecord } from '../../../src/container/model.js';
import type { Spec } from '../../../src/oci/types.js';
import { testSettings } from '../oci/fixtures.js';

/** Every call any fake saw, in order: `network.setup <id>`, `pause.create <id>`, … */
export type CallLog = string[];

export class FakeNetwork implements PodNetwork {
  readonly pins = new Set<string>();
  readonly attached = new Map<string, string[]>();
  failSetup?: Error;
  failTeardown?: Error;
  nextIp = 2;

  constructor(private readonly calls: CallLog) {}

  async createNetns(id: string): Promise<string> {
    this.calls.push(`network.createNetns ${id}`);
    const path = `/fake/netns/${id}`;
    this.pins.add(path);
    return path;
  }
  async pinNetns(id: string, source: string): Promise<string> {
    this.calls.push(`network.pinNetns ${id} ${source}`);
    const path = `/fake/netns/${id}`;
    this.pins.add(path);
    return path;
  }
  async removeNetns(path: string): Promise<void> {
    this.calls.push(`network.removeNetns ${path}`);
    this.pins.delete(path);
  }
  async listNetns(): Promise<string[]> {
    return [...this.pins];
  }
  async attachedSandboxes(): Promise<string[]> {
    return [...this.attached.keys()];
  }
  async setup(req: PodNetworkRequest): Promise<PodNetworkResult> {
    this.calls.push(`network.setup ${req.sandboxId}`);
    if (this.failSetup) throw this.failSetup;
    const ips = [`10.9.0.${this.nextIp++}`];
    this.attached.set(req.sandboxId, ips);
    return { networkName: 'fake', interface: 'eth0', ips, primaryIp: ips[0]!, additionalIps: [], result: { cniVersion: '1.0.0' } as never };
  }
  async teardown(ref: PodNetworkRef): Promise<void> {
    this.calls.push(`network.teardown ${ref.sandboxId}`);
    if (this.failTeardown) throw this.failTeardown;
    this.attached.delete(ref.sandboxId);
  }
  async status(id: string): Promise<PodNetworkResult | undefined> {
    const ips = this.attached.get(id);
    return ips ? { networkName: 'fake', interface: 'eth0', ips, primaryIp: ips[0]!, additionalIps: [], result: { cniVersion: '1.0.0' } as never } : undefined;
  }
}

export class FakePause implements PauseRuntime {
  /** Runtime containers by ID, with the pid of their (fake) process and whether it runs. */
  readonly containers = new Map<string, { pid: number; alive: boolean; spec: Spec }>();
  readonly exits = new Map<string, ExitRecord>();
  failCreate?: Error;
  failStart?: Error;
  /** How often isAlive looked at a process. */
  aliveChecks = 0;
  private nextPid = 1000;

  constructor(private readonly calls: CallLog) {}

  async create(id: string, handler: string, _bundle: string, spec: Spec, ready?: Promise<unknown>): Promise<PauseProcess> {
    // Like conmon, the runtime container comes into being only once the run says it may.
    await ready;
    this.calls.push(`pause.create ${id} ${handler}`);
    if (this.failCreate) throw this.failCreate;
    const pid = this.nextPid++;
    this.containers.set(id, { pid, alive: true, spec });
    return { pid, pidStartTime: BigInt(pid), conmonPid: pid + 10_000, conmonStartTime: 1n };
  }
  async start(id: string): Promise<void> {
    this.calls.push(`pause.start ${id}`);
    if (this.failStart) throw this.failStart;
  }
  async destroy(id: string, handler: string, _refs?: PauseRefs): Promise<ExitRecord | undefined> {
    this.calls.push(`pause.destroy ${id} ${handler}`);
    const c = this.containers.get(id);
    if (c?.alive) this.kill(id, 137);
    this.containers.delete(id);
    return this.exits.get(id);
  }
  async forget(id: string): Promise<void> {
    this.calls.push(`pause.forget ${id}`);
    this.exits.delete(id);
  }
  async readExit(id: string): Promise<ExitRecord | undefined> {
    return this.exits.get(id);
  }
  async isAlive(pid: number): Promise<boolean> {
    this.aliveChecks++;
    return [...this.containers.values()].some((c) => c.pid === pid && c.alive);
  }
  /** The pause process dies; conmon writes the exit record. */
  kill(id: string, exitCode = 137): ExitRecord {
    const c = this.containers.get(id);
    if (!c) throw notFound(`no container ${id}`);
    c.alive = false;
    const exit = { id, exitCode, finishedAtNs: 1_700_000_000_000_000_000n };
    this.exits.set(id, exit);
    return exit;
  }
}

export class FakeHost implements SandboxHost {
  readonly shm = new Set<string>();
  readonly files = new Set<string>();
  readonly cgroups = new Set<string>();
  missing: string[] = [];
  failFiles?: Error;

  /** Limits written by writeCgroupLimits, by cgroup path. */
  readonly limits = new Map<string, unknown>();

  constructor(private readonly calls: CallLog) {}

  async assertSearchableByOthers(): Promise<void> {}

  async writeCgroupLimits(path: string, limits: object): Promise<never[]> {
    this.calls.push('host.writeCgroupLimits');
    await this.held;
    this.limits.set(path, limits);
    return [];
  }

  private held: Promise<void> | undefined;

  /** Cgroup writes wait until `release()`. */
  holdCgroupWrites(): { release(): void } {
    let release!: () => void;
    this.held = new Promise<void>((resolve) => (release = resolve));
    return { release: () => (release(), (this.held = undefined)) };
  }

  async writePodFiles(files: PodFiles): Promise<void> {
    if (this.failFiles) throw this.failFiles;
    this.files.add(files.hostnamePath);
  }
  async mountShm(files: PodFiles): Promise<void> {
    if (files.shmPath !== '/dev/shm') this.shm.add(files.shmPath);
  }
  async unmountShm(files: PodFiles): Promise<void> {
    this.shm.delete(files.shmPath);
  }
  async removePodFiles(files: PodFiles): Promise<void> {
    this.calls.push(`host.removePodFiles`);
    this.shm.delete(files.shmPath);
    this.files.delete(files.hostnamePath);
  }
  async missingCgroupLevels(): Promise<string[]> {
    return [...this.missing];
  }
  async removeCgroup(path: string): Promise<void> {
    this.calls.push(`host.removeCgroup ${path}`);
    this.cgroups.delete(path);
  }
  async writeNetnsSysctls(netnsPath: string, sysctls: Record<string, string>): Promise<void> {
    this.calls.push(`host.writeNetnsSysctls ${netnsPath} ${JSON.stringify(sysctls)}`);
  }
  async removeEmptyCgroup(path: string): Promise<void> {
    this.calls.push(`host.removeEmptyCgroup ${path}`);
  }
}

export class FakeContainers implements PodContainers {
  fail?: Error;
  /** A create waits on this while set. */
  createHeld?: Promise<void>;
  constructor(private readonly calls: CallLog) {}
  /** The containers `create` made, by ID. */
  readonly made = new Map<string, ContainerRecord>();
  async create(podSandboxId: string): Promise<ContainerRecord> {
    this.calls.push(`containers.create ${podSandboxId}`);
    await this.createHeld;
    this.calls.push(`containers.created ${podSandboxId}`);
    const record = { id: String(this.made.size).padStart(64, 'c'), sandboxId: podSandboxId } as ContainerRecord;
    this.made.set(record.id, record);
    return record;
  }
  find(idOrPrefix: string): ContainerRecord | undefined {
    return [...this.made.values()].find((r) => r.id.startsWith(idOrPrefix));
  }
  async start(id: string): Promise<void> {
    this.calls.push(`containers.start ${id}`);
    if (!this.made.has(id)) throw notFound(`container "${id}" not found`);
  }
  async stopAll(id: string, timeout: number): Promise<void> {
    this.calls.push(`containers.stopAll ${id} ${timeout}`);
    if (this.fail) throw this.fail;
  }
  async removeAll(id: string): Promise<void> {
    this.calls.push(`containers.removeAll ${id}`);
  }
  async handleExit(exit: { id: string }): Promise<boolean> {
    this.calls.push(`containers.handleExit ${exit.id}`);
    return false;
  }
}

/** The pod events published, as `<type> <id>`. */
export class FakePodEvents {
  readonly published: { type: LifecycleEventType; id: string }[] = [];
  pod(type: LifecycleEventType, sandboxId: string): void {
    this.published.push({ type, id: sandboxId });
  }
}

/** A service over fakes and a temp root/state. */
export class Harness {
  readonly calls: CallLog = [];
  readonly network = new FakeNetwork(this.calls);
  readonly pause = new FakePause(this.calls);
  readonly host = new FakeHost(this.calls);
  readonly containers = new FakeContainers(this.calls);
  readonly events = new FakePodEvents();
  service!: SandboxService;
  /** RunPodSandbox over the same options. */
  runner!: SandboxRunner;
  /** The pod lifecycle over the service, the fake containers and the event recorder. */
  pods!: PodLifecycle;
  store!: SandboxStore;

  private constructor(readonly dir: string) {}

  static async create(): Promise<Harness> {
    const h = new Harness(await mkdtemp(join(tmpdir(), 'stove-sandbox-unit-')));
    h.restart();
    return h;
  }

  get stateRoot(): string {
    return join(this.dir, 'state', 'sandboxes');
  }

  /** A new service over the same dirs and fakes: what a daemon restart sees. */
  restart(): SandboxService {
    this.store = new SandboxStore(join(this.dir, 'root'));
    const store = this.store;
    const options: SandboxServiceOptions = {
      store,
      sandboxStateDir: (id) => join(this.stateRoot, id),
      network: this.network,
      pause: this.pause,
      runtimes: {
        get: (h: string) => {
          if (h !== '' && h !== 'runc' && h !== 'crun') throw notFound(`no runtime for "${h}" is configured`);
          return {};
        },
        names: () => ['runc', 'crun'],
      },
      host: this.host,
      specSettings: testSettings(),
      pauseRootfs: '/fake/rootfs/pause',
      defaults: { cgroupParent: '/kubepods', cgroupDriver: 'cgroupfs' },
      parentUsers: new CgroupParentUsers(() => store.list()),
      telemetry: NO_TELEMETRY,
      log: silentLogger,
    };
    this.service = new SandboxService(options);
    this.runner = new SandboxRunner(options);
    this.pods = new PodLifecycle({ runner: this.runner, sandboxes: this.service, containers: this.containers, events: this.events });
    return this.service;
  }

  async cleanup(): Promise<void> {
    await rm(this.dir, { recursive: true, force: true });
  }
}

export const boom = (what: string) => internal(`${what} failed`);
