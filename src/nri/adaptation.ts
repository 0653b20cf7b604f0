/**
 * The runtime side of NRI (containerd/nri's adaptation): it accepts external plugins on a socket,
 * starts the pre-launched ones from the plugin dir, and relays Stove's pod and container lifecycle to
 * them in index order, merging their answers.
 *
 * Events go out one at a time, in the order Stove raises them; a newly connected plugin is synchronized
 * between two events. Every call to a plugin is bounded by the request timeout; a plugin that times out
 * or disconnects is closed and dropped, and the event carries on without it.
 */
import { chmod, lstat, mkdir, readdir, readFile, rm, stat } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import {
  Container as ContainerMessage,
  CreateContainerRequest,
  ValidateContainerAdjustmentRequest,
  Event,
  UpdateContainerRequest,
  type Container,
  type ContainerAdjustment,
  type ContainerUpdate,
  type LinuxResources,
  type PodSandbox,
} from '../gen/nri/api.js';
import { messageOf, StoveError } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import { writeJsonAtomic } from '../persist/atomic-file.js';
import { startProcess } from '../platform/processes.js';
import type { NriDefaultValidatorConfig } from '../config/schema.js';
import type { RuntimeSupport } from '../cdi/index.js';
import { DEFAULT_VALIDATOR, defaultValidatorVerdict } from './default-validator.js';
import { isPluginIndex, NriPlugin, type NotifyEvent, type PluginTimeouts } from './plugin.js';
import { CreateResult, PluginConflictError, UpdateResult } from './result.js';
import { TtrpcStatusError } from './ttrpc.js';

export interface NriSettings {
  socketPath: string;
  pluginPath: string;
  pluginConfigPath: string;
  timeouts: PluginTimeouts;
  /** Only pre-launched plugins: no socket for external ones. */
  disableConnections: boolean;
  /** Where the list of connected plugins is kept for `stove check`. */
  statusFile?: string;
  /** The built-in default validator's rules (default-validator.ts); inert unless `enable`. */
  defaultValidator?: NriDefaultValidatorConfig;
}

/** What the adaptation needs from the rest of Stove. */
export interface NriHost {
  /** Every pod and container Stove knows now (for Synchronize). */
  snapshot(): Promise<{ pods: PodSandbox[]; containers: Container[] }>;
  /** Applies a plugin's update to a container, like UpdateContainerResources; throws on failure. */
  updateContainer(update: ContainerUpdate): Promise<void>;
}

export interface PluginInfo {
  name: string;
  index: string;
  kind: 'external' | 'pre-launched';
  pid?: number;
  events: number;
}

/** A plugin's own failure of an event: the CRI call that raised it fails with the plugin named. */
export class NriPluginError extends StoveError {}

export class NriAdaptation {
  private plugins: NriPlugin[] = [];
  private server: Server | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private updateChain: Promise<void> = Promise.resolve();
  private stopped = false;
  /** Why external plugins cannot connect (the socket path is someone else's), if so. */
  private socketProblem: string | undefined;
  /** The socket this daemon made, so that stopping removes that one only. */
  private socketIdentity: { dev: number; ino: number } | undefined;

  constructor(
    private readonly options: NriSettings & {
      runtimeName: string;
      runtimeVersion: string;
      host: NriHost;
      log: Logger;
    },
  ) {}

  /** Starts the pre-launched plugins, then listens for external ones. */
  async start(): Promise<void> {
    await this.startLaunched();
    if (!this.options.disableConnections) await this.listen();
    await this.writeStatus();
  }

  /** Plugins now serving, in call order. */
  list(): PluginInfo[] {
    return this.plugins.filter((p) => !p.isClosed).map((p) => ({ name: p.baseName, index: p.index, kind: p.kind, pid: p.pid, events: p.events }));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    await this.removeSocket();
    const plugins = this.plugins.splice(0);
    await Promise.all(plugins.map((p) => p.shutdown()));
    for (const p of plugins) p.close('runtime shutting down');
    if (this.options.statusFile) await rm(this.options.statusFile, { force: true }).catch(() => undefined);
  }

  // ---------------------------------------------------------------------------------------------
  // Events

  runPodSandbox(pod: PodSandbox): Promise<void> {
    return this.stateChange(Event.RUN_POD_SANDBOX, pod);
  }

  stopPodSandbox(pod: PodSandbox): Promise<void> {
    return this.stateChange(Event.STOP_POD_SANDBOX, pod);
  }

  removePodSandbox(pod: PodSandbox): Promise<void> {
    return this.stateChange(Event.REMOVE_POD_SANDBOX, pod);
  }

  /**
   * A pod being resized (UpdatePodSandboxResources): waited for; a plugin's error fails the resize,
   * naming it (containerd's behaviour). Plugins cannot change the resources.
   */
  updatePodSandbox(pod: PodSandbox, overhead: LinuxResources | undefined, resources: LinuxResources | undefined): Promise<void> {
    return this.serial(async () => {
      for (const p of this.active()) {
        await p.updatePodSandbox({ pod, overheadLinuxResources: overhead, linuxResources: resources }).catch((err: unknown) => {
          throw pluginError(p, 'UpdatePodSandbox', err);
        });
      }
    });
  }

  postUpdatePodSandbox(pod: PodSandbox): Promise<void> {
    return this.stateChange(Event.POST_UPDATE_POD_SANDBOX, pod);
  }

  /**
   * Asks every subscribed plugin, in order, to adjust a container being created. Returns the merged
   * adjustment; updates of other containers are applied. A plugin's error or a conflict between two
   * plugins is a NriPluginError naming them. `runtime`: what the container's OCI runtime implements,
   * which the adjustments that need a newer runtime are checked against (result.ts).
   */
  createContainer(pod: PodSandbox, container: Container, runtime?: RuntimeSupport): Promise<ContainerAdjustment> {
    return this.serial(async () => {
      const pristine = ContainerMessage.fromPartial(container);
      const result = new CreateResult(container, runtime);
      for (const p of this.active()) {
        const req = CreateContainerRequest.fromPartial({ pod, container: result.container });
        const rpl = await p.createContainer(req).catch((err: unknown) => {
          throw pluginError(p, 'CreateContainer', err);
        });
        try {
          result.apply(rpl, p.name);
        } catch (err) {
          throw new NriPluginError(err instanceof PluginConflictError ? err.code : 'InvalidArgument', `NRI: ${messageOf(err)}`);
        }
        this.logEvictions(p, rpl?.evict);
      }
      await this.validate(pod, pristine, result);
      this.applyUpdates(result.containerUpdates, 'CreateContainer');
      return result.adjust;
    });
  }

  /**
   * Asks every validator, all at once, to accept the merged adjustment (with who set what): the
   * built-in default validator when it is enabled, and every validator plugin. One rejection or
   * failure fails the create, naming the validator (NRI's messages).
   */
  private async validate(pod: PodSandbox, container: Container, result: CreateResult): Promise<void> {
    const consulted = this.active();
    const validators = consulted.filter((p) => p.isValidator);
    const builtin = this.options.defaultValidator?.enable ? this.options.defaultValidator : undefined;
    if (!validators.length && !builtin) return;
    const req = ValidateContainerAdjustmentRequest.fromPartial({
      pod,
      container,
      adjust: result.adjust,
      update: result.containerUpdates,
      owners: result.owningPlugins,
      plugins: [...(builtin ? [{ name: DEFAULT_VALIDATOR.name, index: DEFAULT_VALIDATOR.index }] : []), ...consulted.map((p) => ({ name: p.baseName, index: p.index }))],
    });
    const rejected = (name: string, reason: string) => `validator "${name}" rejected container adjustment, reason: ${reason}`;
    const own = builtin ? defaultValidatorVerdict(builtin, req) : undefined;
    const verdicts = await Promise.all(
      validators.map((p) =>
        p.validate(req).then(
          (rpl) => (rpl?.reject ? rejected(p.name, rpl.reason || 'unknown rejection reason') : undefined),
          (err: unknown) => `validator plugin ${p.name} failed: ${messageOf(err)}`,
        ),
      ),
    );
    const refused = [own && rejected(`${DEFAULT_VALIDATOR.index}-${DEFAULT_VALIDATOR.name}`, own), ...verdicts].filter((v) => v);
    if (refused.length) throw new NriPluginError('InvalidArgument', `NRI: ${refused.join('; ')}`);
  }

  postCreateContainer(pod: PodSandbox, container: Container): Promise<void> {
    return this.stateChange(Event.POST_CREATE_CONTAINER, pod, container);
  }

  startContainer(pod: PodSandbox, container: Container): Promise<void> {
    return this.stateChange(Event.START_CONTAINER, pod, container);
  }

  postStartContainer(pod: PodSandbox, container: Container): Promise<void> {
    return this.stateChange(Event.POST_START_CONTAINER, pod, container);
  }

  /** Lets plugins change the resources of a container being updated; returns them as they end up. */
  updateContainer(pod: PodSandbox, container: Container, resources: LinuxResources): Promise<LinuxResources> {
    return this.serial(async () => {
      const request = UpdateContainerRequest.fromPartial({ pod, container, linuxResources: resources });
      const result = new UpdateResult(request);
      for (const p of this.active()) {
        const rpl = await p.updateContainer(UpdateContainerRequest.fromPartial(request)).catch((err: unknown) => {
          throw pluginError(p, 'UpdateContainer', err);
        });
        try {
          result.apply(rpl?.update, p.name);
        } catch (err) {
          throw new NriPluginError('InvalidArgument', `NRI: ${messageOf(err)}`);
        }
        this.logEvictions(p, rpl?.evict);
      }
      this.applyUpdates(result.containerUpdates, 'UpdateContainer');
      return request.linuxResources!;
    });
  }

  postUpdateContainer(pod: PodSandbox, container: Container): Promise<void> {
    return this.stateChange(Event.POST_UPDATE_CONTAINER, pod, container);
  }

  /** The container has stopped; plugins may update others in answer. Never fails. */
  stopContainer(pod: PodSandbox, container: Container): Promise<void> {
    return this.serial(async () => {
      const result = new UpdateResult();
      for (const p of this.active()) {
        try {
          const rpl = await p.stopContainer({ pod, container });
          result.apply(rpl?.update, p.name);
        } catch (err) {
          this.options.log.warn('NRI plugin failed StopContainer', { plugin: p.name, container: container.id, error: messageOf(err) });
        }
      }
      this.applyUpdates(result.containerUpdates, 'StopContainer');
    });
  }

  removeContainer(pod: PodSandbox, container: Container): Promise<void> {
    return this.stateChange(Event.REMOVE_CONTAINER, pod, container);
  }

  /** A notification: errors are logged (the plugin stays unless it timed out or went away). */
  private stateChange(event: NotifyEvent, pod: PodSandbox, container?: Container): Promise<void> {
    return this.serial(async () => {
      for (const p of this.active()) {
        await p.notify({ event, pod, container }).catch((err: unknown) => {
          this.options.log.warn('NRI plugin failed an event', { plugin: p.name, event: Event[event], error: messageOf(err) });
        });
      }
    });
  }

  // ---------------------------------------------------------------------------------------------
  // Plugins

  private active(): NriPlugin[] {
    return this.plugins.filter((p) => !p.isClosed);
  }

  /** One event or synchronization at a time. */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  private logEvictions(p: NriPlugin, evict: { containerId: string; reason: string }[] | undefined): void {
    for (const e of evict ?? []) this.options.log.warn('NRI plugin asked to evict a container; eviction is not supported', { plugin: p.name, container: e.containerId, reason: e.reason });
  }

  /**
   * Applies updates a plugin asked for in answer to an event, after the event and in order; failures
   * are logged. The event does not wait: applying takes the other containers' locks, whose holders may
   * be waiting for this very event.
   */
  private applyUpdates(updates: ContainerUpdate[], event: string): void {
    if (!updates.length) return;
    this.updateChain = this.updateChain.then(async () => {
      const failed = await this.updateContainers(updates);
      for (const u of failed) this.options.log.warn('NRI container update failed', { event, container: u.containerId });
    });
  }

  /** Resolves once every update asked for so far has been applied (or has failed). */
  async settled(): Promise<void> {
    await this.updateChain;
  }

  /** Applies updates one by one; returns those that failed (ignore_failure ones are only logged). */
  private async updateContainers(updates: ContainerUpdate[]): Promise<ContainerUpdate[]> {
    const failed: ContainerUpdate[] = [];
    for (const u of updates) {
      try {
        await this.options.host.updateContainer(u);
      } catch (err) {
        this.options.log.warn('cannot apply an NRI container update', { container: u.containerId, error: messageOf(err), ignored: u.ignoreFailure });
        if (!u.ignoreFailure) failed.push(u);
      }
    }
    return failed;
  }

  /** Synchronizes a started plugin and puts it in the call order (or drops it). */
  private adopt(p: NriPlugin): Promise<void> {
    return this.serial(async () => {
      if (this.stopped || p.isClosed) return;
      try {
        const { pods, containers } = await this.options.host.snapshot();
        const updates = await p.synchronize(pods, containers);
        this.applyUpdates(updates, 'Synchronize');
      } catch (err) {
        p.close(`failed to synchronize: ${messageOf(err)}`);
        return;
      }
      this.plugins.push(p);
      this.plugins.sort((a, b) => (a.index < b.index ? -1 : a.index > b.index ? 1 : 0));
      p.onClose(() => {
        this.plugins = this.plugins.filter((x) => x !== p);
        void this.writeStatus();
      });
      this.options.log.info('NRI plugin synchronized', { plugin: p.name, kind: p.kind, order: this.plugins.map((x) => x.name) });
      await this.writeStatus();
    });
  }

  private async startLaunched(): Promise<void> {
    const found = await discoverPlugins(this.options.pluginPath, this.options.log);
    await Promise.all(
      found.map(async ({ index, name, file }) => {
        const config = await pluginConfig(this.options.pluginConfigPath, index, name).catch((err: unknown) => {
          this.options.log.warn('cannot read NRI plugin config', { plugin: `${index}-${name}`, error: messageOf(err) });
          return undefined;
        });
        if (config === undefined) return;
        const child = startProcess(file, [], {
          // NRI gives a pre-launched plugin exactly these variables, and its end of a socketpair as fd 3.
          env: { NRI_PLUGIN_NAME: name, NRI_PLUGIN_IDX: index, NRI_PLUGIN_SOCKET: '3' },
          stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
          directPipes: true,
        });
        const log = this.options.log.child({ plugin: `${index}-${name}` });
        child.on('error', (err: Error) => log.warn('NRI plugin process failed', { error: err.message }));
        forwardOutput(child.stdout, log);
        forwardOutput(child.stderr, log);
        const socket = child.stdio[3] as Socket;
        const p = new NriPlugin({ socket, timeouts: this.options.timeouts, runtime: this.runtimeCallbacks(), log, launched: { index, name, child, config } });
        child.on('exit', (code: number | null, signal: NodeJS.Signals | null) => p.close(`plugin process exited (${signal ?? code})`));
        try {
          await p.start(this.options.runtimeName, this.options.runtimeVersion);
        } catch (err) {
          log.warn('failed to start pre-launched NRI plugin', { error: messageOf(err) });
          return;
        }
        await this.adopt(p);
      }),
    );
  }

  /**
   * Listens on the socket path, unless another process serves it (another runtime with NRI on, or
   * another Stove): that socket is left alone, external plugins cannot reach this daemon, and the
   * status file and the log say so. A stale socket (nobody accepts on it) is replaced.
   */
  private async listen(): Promise<void> {
    const path = this.options.socketPath;
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    const existing = await lstat(path).catch(() => undefined);
    if (existing && !existing.isSocket()) {
      this.socketProblem = `${path} exists and is not a socket`;
    } else if (existing && (await isServed(path))) {
      this.socketProblem = `${path} is served by another process (another runtime or Stove with NRI on)`;
    }
    if (this.socketProblem) {
      this.options.log.error('NRI cannot accept external plugins: ' + this.socketProblem, {
        socket: path,
        fix: 'give this daemon a socket of its own (nri.socket_path) or set nri.disable_connections = true',
      });
      return;
    }
    await rm(path, { force: true });
    const server = createServer((socket) => void this.accept(socket));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, () => {
        server.off('error', reject);
        resolve();
      });
    });
    // Plugins are trusted with every container: only root may connect.
    await chmod(path, 0o600);
    const mine = await lstat(path);
    this.socketIdentity = { dev: mine.dev, ino: mine.ino };
    server.on('error', (err) => this.options.log.warn('NRI socket failed', { error: err.message }));
    this.server = server;
    this.options.log.info('NRI accepting plugin connections', { socket: path });
  }

  /** Removes the socket if it is still the one this daemon made (another may have replaced it). */
  private async removeSocket(): Promise<void> {
    const id = this.socketIdentity;
    if (!id) return;
    const now = await lstat(this.options.socketPath).catch(() => undefined);
    if (now && now.dev === id.dev && now.ino === id.ino) await rm(this.options.socketPath, { force: true }).catch(() => undefined);
  }

  private async accept(socket: Socket): Promise<void> {
    const p = new NriPlugin({ socket, timeouts: this.options.timeouts, runtime: this.runtimeCallbacks(), log: this.options.log });
    try {
      await p.start(this.options.runtimeName, this.options.runtimeVersion);
    } catch (err) {
      this.options.log.warn('failed to start external NRI plugin', { error: messageOf(err) });
      return;
    }
    await this.adopt(p);
  }

  private runtimeCallbacks() {
    return {
      updateContainers: async (updates: ContainerUpdate[], plugin: string) => {
        this.options.log.info('NRI plugin requested container updates', { plugin, containers: updates.map((u) => u.containerId) });
        return this.updateContainers(updates);
      },
    };
  }

  private async writeStatus(): Promise<void> {
    if (!this.options.statusFile || this.stopped) return;
    const socket = this.options.disableConnections || this.socketProblem ? '' : this.options.socketPath;
    await writeJsonAtomic(this.options.statusFile, { socket, ...(this.socketProblem ? { socketProblem: this.socketProblem } : {}), plugins: this.list() }).catch((err: unknown) =>
      this.options.log.warn('cannot write the NRI plugin list', { error: messageOf(err) }),
    );
  }
}

/** A plugin's failure as the error of the CRI call, naming it. */
function pluginError(p: NriPlugin, what: string, err: unknown): NriPluginError {
  const detail = err instanceof TtrpcStatusError ? err.message : messageOf(err);
  return new NriPluginError('Internal', `NRI plugin "${p.name}" failed to handle ${what}: ${detail}`, { cause: err });
}

function forwardOutput(stream: NodeJS.ReadableStream | null, log: Logger): void {
  if (!stream) return;
  let pending = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    pending += chunk;
    const lines = pending.split('\n');
    pending = lines.pop()!.slice(-4096);
    for (const line of lines) if (line) log.info('NRI plugin output', { line: line.slice(0, 4096) });
  });
}

export interface DiscoveredPlugin {
  index: string;
  name: string;
  file: string;
}

/** Executable regular files named `<idx>-<name>` in the plugin dir; anything else is skipped with a warning. */
export async function discoverPlugins(dir: string, log?: Logger): Promise<DiscoveredPlugin[]> {
  let entries: string[];
  try {
    entries = await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const found: DiscoveredPlugin[] = [];
  for (const entry of entries.sort()) {
    const file = join(dir, entry);
    const st = await stat(file).catch(() => undefined);
    if (!st || !st.isFile() || (st.mode & 0o111) === 0) continue;
    const dash = entry.indexOf('-');
    const index = entry.slice(0, dash);
    const name = entry.slice(dash + 1);
    if (dash < 0 || !isPluginIndex(index) || !name) {
      log?.warn('skipping NRI plugin with an invalid name, <two-digit index>-<name> expected', { file });
      continue;
    }
    found.push({ index, name, file });
  }
  return found;
}

/** `<idx>-<name>.conf`, else `<name>.conf`, in the config dir; '' when neither exists. */
export async function pluginConfig(dir: string, index: string, name: string): Promise<string> {
  for (const file of [`${index}-${name}.conf`, `${name}.conf`]) {
    try {
      const st = await stat(join(dir, file));
      if (st.size > 1 << 20) throw new Error(`${join(dir, file)} is larger than 1 MiB`);
      return await readFile(join(dir, file), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
  return '';
}

/** Whether a process accepts connections on the unix socket at `path` (bounded: 1 s). */
function isServed(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = connect(path);
    const done = (served: boolean) => {
      clearTimeout(timer);
      probe.destroy();
      resolve(served);
    };
    const timer = setTimeout(() => done(true), 1000);
    probe.once('connect', () => done(true));
    probe.once('error', () => done(false));
  });
}
