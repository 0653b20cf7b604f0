/**
 * Fakes for the container service: a sandbox lookup, an image service that "mounts" a directory with
 * /etc/passwd, a monitor and an OCI runtime that record calls and can be told to fail, all over a temp
 * dir. No root, no processes.
 */
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PodSandboxConfig } from '../../../src/gen/runtime/v1/api.js';
import { silentLogger } from '../../../src/common/logger.js';
import { NO_TELEMETRY } from '../../../src/observability/hooks.js';
import { notFound } from '../../../src/common/errors.js';
import { ContainerService } from '../../../src/container/service.js';
import { LifecycleEvents } from '../../../src/pod/events.js';
import { ContainerStore } from '../../../src/container/store.js';
import type { ContainerImages, ContainerServiceOptions, SandboxLookup } from '../../../src/container/deps.js';
import type { ImageInfo } from '../../../src/images/image-service.js';
import type { Monitor } from '../../../src/monitor/monitor.js';
import type { ExitRecord } from '../../../src/monitor/exits.js';
import type { CreateContainerOptions, CreatedContainer } from '../../../src/monitor/conmon.js';
import type { Runc } from '../../../src/runtime/runc.js';
import type { SandboxRecord } from '../../../src/sandbox/model.js';
import { testSettings } from '../oci/fixtures.js';

export const IMAGE_ID = 'sha256:' + '1'.repeat(64);
export const IMAGE_NAME = 'registry.test/app:1';

export class FakeSandboxes implements SandboxLookup {
  readonly records = new Map<string, SandboxRecord>();

  /** `logDirectory`: the pods' log_directory (a temp dir: creates make their log files there). */
  constructor(private readonly logDirectory: string) {}

  add(id: string, over: Partial<SandboxRecord> = {}): SandboxRecord {
    const config = PodSandboxConfig.fromPartial({ metadata: { name: `pod-${id.slice(0, 4)}`, namespace: 'ns', uid: `uid-${id}`, attempt: 0 }, logDirectory: this.logDirectory });
    const record: SandboxRecord = {
      id,
      name: `pod-${id}`,
      config: PodSandboxConfig.toJSON(config),
      runtimeHandler: '',
      createdAt: 1n,
      state: 'ready',
      hostname: 'pod-host',
      netnsPath: '/run/netns/x',
      ips: ['10.0.0.2'],
      cgroupParent: '/kubepods',
      cgroupsPath: `/kubepods/${id}`,
      createdCgroupParents: [],
      pausePid: 4242,
      pauseStartTime: 1n,
      conmonPid: 4241,
      conmonStartTime: 1n,
      namespaces: {},
      files: { hostnamePath: '/h', resolvConfPath: '/r', hostsPath: '/hosts', shmPath: '/shm' },
      stateDir: '/state',
      bundleDir: '/bundle',
      ...over,
    };
    this.records.set(id, record);
    return record;
  }

  find(idOrPrefix: string): SandboxRecord | undefined {
    return [...this.records.values()].find((r) => r.id.startsWith(idOrPrefix));
  }

  list(): SandboxRecord[] {
    return [...this.records.values()];
  }
}

export class FakeImages implements ContainerImages {
  readonly holds = new Set<string>();
  readonly mounted = new Set<string>();
  readonly calls: string[] = [];

  getImage(spec: string): ImageInfo {
    if (spec !== IMAGE_NAME && spec !== IMAGE_ID) throw notFound(`image "${spec}" not found`);
    return { id: IMAGE_ID, repoTags: [IMAGE_NAME], repoDigests: [`registry.test/app@sha256:${'2'.repeat(64)}`], config: { Cmd: ['sleep', '60'], StopSignal: 'SIGQUIT' }, platform: {}, layerDirs: [] };
  }
  /** Manifest annotations of the fake image (a test sets the checkpoint image's). */
  annotations: Record<string, string> = {};
  async manifestFacts(id: string) {
    this.getImage(id);
    return { annotations: this.annotations, layerBlobs: ['/nonexistent/blobs/layer'] };
  }
  hasOwnStore() {
    return false;
  }
  async mountRootfs(_image: string, id: string, target: string): Promise<'host'> {
    this.calls.push(`mount ${id}`);
    this.holds.add(id);
    await mkdir(join(target, 'etc'), { recursive: true });
    await writeFile(join(target, 'etc', 'passwd'), 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n');
    await writeFile(join(target, 'etc', 'group'), 'root:x:0:\nuser:x:1000:\n');
    this.mounted.add(id);
    return 'host';
  }
  /** An image volume: the target gets a `data/` dir with one file, like a mounted image would. */
  async mountImageVolume(spec: string, id: string, index: number, target: string): Promise<ImageInfo> {
    const image = this.getImage(spec);
    this.calls.push(`mount volume ${index} of ${id}`);
    await mkdir(join(target, 'data'), { recursive: true });
    await writeFile(join(target, 'data', 'file'), 'x');
    return image;
  }
  async removeRootfs(id: string): Promise<void> {
    this.calls.push(`remove ${id}`);
    this.mounted.delete(id);
    this.holds.delete(id);
  }
  async rootfsUsage() {
    return { bytes: 4096n, inodes: 1n };
  }
  /** Under the test's temp dir: the copies of declared VOLUMEs (none of the fake images declares one). */
  declaredVolumesDir(id: string): string {
    return join(tmpdir(), 'stove-fake-volumes', id);
  }
  heldImage(id: string) {
    return this.holds.has(id) ? IMAGE_ID : undefined;
  }
  async holdImage(spec: string, id: string): Promise<ImageInfo> {
    const image = this.getImage(spec);
    this.calls.push(`hold ${id}`);
    this.holds.add(id);
    return image;
  }
  holders(): string[] {
    return [...this.holds];
  }
  async unpackArchive(path: string): Promise<void> {
    this.calls.push(`unpack ${path}`);
  }
  upperDirOf(id: string): string {
    return `/nonexistent/${id}/upper`;
  }
}

/** The runtime: records every call; `failStart` makes `start` fail. */
export class FakeRuntime {
  readonly binary = '/usr/bin/runc';
  readonly calls: string[] = [];
  failStart = false;
  states = new Map<string, string>();
  /** Called after each kill with the signal. */
  onKill: (id: string, signal: string) => void = () => {};

  async start(id: string) {
    this.calls.push(`start ${id}`);
    if (this.failStart) throw new Error('exec: "nope": executable file not found in $PATH');
    this.states.set(id, 'running');
  }
  async kill(id: string, signal: string) {
    this.calls.push(`kill ${id} ${signal}`);
    this.onKill(id, signal);
  }
  async delete(id: string) {
    this.calls.push(`delete ${id}`);
    this.states.delete(id);
  }
  async update(id: string, resources: unknown) {
    this.calls.push(`update ${id} ${JSON.stringify(resources)}`);
  }
  async state(id: string) {
    const status = this.states.get(id);
    if (!status) throw notFound(`container "${id}" does not exist`);
    return { ociVersion: '1.0.2', id, status, pid: 1, bundle: '' };
  }
}

/** The monitor: `createContainer` succeeds unless `failCreate`; exits are set by the test. */
export class FakeMonitor {
  readonly exits = new Map<string, ExitRecord>();
  readonly calls: string[] = [];
  failCreate: Error | undefined;
  alive = true;

  constructor(private readonly runtime: FakeRuntime) {}

  async createContainer(_rt: Runc, opts: CreateContainerOptions): Promise<CreatedContainer> {
    this.calls.push(`create ${opts.id}`);
    if (opts.beforeStart) await opts.beforeStart(99);
    if (this.failCreate) throw this.failCreate;
    this.runtime.states.set(opts.id, 'created');
    return { pid: 100, pidStartTime: 1n, conmonPid: 99, conmonStartTime: 1n };
  }
  async removeContainerFiles(id: string) {
    this.calls.push(`forget ${id}`);
  }
  async readExit(id: string) {
    return this.exits.get(id);
  }
  async waitForExit(id: string) {
    return this.exits.get(id);
  }
  async isMonitorAlive() {
    return this.alive;
  }
}

export interface Harness {
  dir: string;
  service: ContainerService;
  sandboxes: FakeSandboxes;
  images: FakeImages;
  runtime: FakeRuntime;
  monitor: FakeMonitor;
  options: ContainerServiceOptions;
  /** The event publisher the service was given. */
  events: LifecycleEvents;
  /** A new service over the same dir (a restart), with its options. */
  restart(): { service: ContainerService; options: ContainerServiceOptions };
  cleanup(): Promise<void>;
}

export async function harness(): Promise<Harness> {
  const dir = await mkdtemp(join(tmpdir(), 'stove-ctr-unit-'));
  const sandboxes = new FakeSandboxes(join(dir, 'pod-logs'));
  const images = new FakeImages();
  const runtime = new FakeRuntime();
  const monitor = new FakeMonitor(runtime);
  const make = (): ContainerServiceOptions => {
    const store = new ContainerStore(join(dir, 'root'));
    // The pod's status is left out of events here: the fake sandboxes have no CRI config.
    const events = new LifecycleEvents({ sandbox: () => undefined, containersOf: (id) => store.ofSandbox(id), log: silentLogger });
    return {
      store,
      events,
      sandboxes,
      images,
      monitor: monitor as unknown as Monitor,
      runtimes: { get: () => runtime as unknown as Runc },
      specSettings: testSettings(),
      cgroups: { version: 1, hierarchies: [] },
      containerDir: (id) => join(dir, 'root', 'containers', id),
      containerStateDir: (id) => join(dir, 'state', 'containers', id),
      killTimeoutMs: 500,
      telemetry: NO_TELEMETRY,
      log: silentLogger,
    };
  };
  const options = make();
  return {
    dir,
    service: new ContainerService(options),
    sandboxes,
    images,
    runtime,
    monitor,
    options,
    events: options.events as LifecycleEvents,
    restart: () => {
      const again = make();
      return { service: new ContainerService(again), options: again };
    },
    cleanup: () => rm(dir, { recursive: true, force: true }),
  };
}
