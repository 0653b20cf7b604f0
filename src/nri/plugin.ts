/**
 * One NRI plugin as the runtime sees it: a socket carrying NRI's mux, the plugin's service on
 * connection 1 (Stove calls it) and Stove's Runtime service on connection 2 (the plugin calls it).
 *
 *   connect → plugin calls RegisterPlugin (registration timeout) → Configure (its event mask)
 *   → Synchronize (every pod and container) → the events it subscribed to, each bounded by the
 *   request timeout.
 *
 * A call that times out or finds the connection gone closes the plugin (it is then dropped); a plugin's
 * own error answer is returned to the caller.
 */
import type { Duplex } from 'node:stream';
import {
  PluginService,
  RuntimeService,
  SynchronizeRequest,
  type Container,
  type ContainerUpdate,
  type CreateContainerRequest,
  type CreateContainerResponse,
  Event,
  type PodSandbox,
  type StateChangeEvent,
  type StopContainerRequest,
  type StopContainerResponse,
  type UpdateContainerRequest,
  type UpdateContainerResponse,
} from '../gen/nri/api.js';
import type { Logger } from '../common/logger.js';
import type { SpawnedProcess } from '../platform/processes.js';
import { Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN } from './mux.js';
import { callMethod, Code, serveMethod, TtrpcChannel, TtrpcFatalError, TtrpcHandlerError } from './ttrpc.js';
import { TTRPC_MAX_MESSAGE } from './ttrpc-frame.js';
import { failedPrecondition } from '../common/errors.js';

/** Every event a plugin can subscribe to: bits 0..10 (event n is bit n-1). */
export const VALID_EVENTS = (1 << 11) - 1;

export function eventBit(event: Event): number {
  return 1 << (event - 1);
}

/** Two decimal digits, as NRI requires of a plugin index. */
export function isPluginIndex(idx: string): boolean {
  return /^[0-9]{2}$/.test(idx);
}

export interface PluginTimeouts {
  registrationMs: number;
  requestMs: number;
}

/** What a plugin may ask of the runtime on its own. */
export interface RuntimeCallbacks {
  /** Applies updates; returns those that failed. */
  updateContainers(updates: ContainerUpdate[], plugin: string): Promise<ContainerUpdate[]>;
}

export interface PluginOptions {
  socket: Duplex;
  timeouts: PluginTimeouts;
  runtime: RuntimeCallbacks;
  log: Logger;
  /** Set for pre-launched plugins: their identity comes from the file name, not from registration. */
  launched?: { index: string; name: string; child: SpawnedProcess; config: string };
  /** Peer pid (for listing), when known. */
  pid?: number;
}

export class NriPlugin {
  index = '';
  baseName = '';
  events = 0;
  readonly pid: number | undefined;
  readonly external: boolean;
  private readonly mux: Mux;
  private readonly client: TtrpcChannel;
  private readonly server: TtrpcChannel;
  private registered: ((err?: Error) => void) | undefined;
  private closed = false;
  private isRegistered = false;
  private readonly closeListeners: (() => void)[] = [];
  private log: Logger;

  constructor(private readonly options: PluginOptions) {
    this.external = !options.launched;
    this.pid = options.launched?.child.pid ?? options.pid;
    if (options.launched) {
      this.index = options.launched.index;
      this.baseName = options.launched.name;
    }
    this.log = options.log;
    this.mux = new Mux(options.socket);
    const fail = (err: Error) => this.close(`protocol error: ${err.message}`);
    this.client = new TtrpcChannel((b) => this.mux.write(PLUGIN_SERVICE_CONN, b), fail);
    this.server = new TtrpcChannel((b) => this.mux.write(RUNTIME_SERVICE_CONN, b), fail);
    this.mux.open(PLUGIN_SERVICE_CONN, (d) => this.client.receive(d));
    this.mux.open(RUNTIME_SERVICE_CONN, (d) => this.server.receive(d));
    this.mux.onClose((err) => this.close(err ? `connection failed: ${err.message}` : 'connection closed'));
    serveMethod(this.server, RuntimeService.registerPlugin, async (req) => {
      this.onRegister(req.pluginName, req.pluginIdx);
      return {};
    });
    serveMethod(this.server, RuntimeService.updateContainers, async (req) => {
      if (!this.isRegistered) throw new TtrpcHandlerError(Code.FailedPrecondition, 'plugin is not registered');
      const failed = await this.options.runtime.updateContainers(req.update, this.name);
      return { failed };
    });
  }

  /** `<index>-<name>`, the name NRI errors and logs use. */
  get name(): string {
    return `${this.index || '??'}-${this.baseName || 'plugin'}`;
  }

  get kind(): 'external' | 'pre-launched' {
    return this.external ? 'external' : 'pre-launched';
  }

  get isClosed(): boolean {
    return this.closed;
  }

  onClose(listener: () => void): void {
    if (this.closed) listener();
    else this.closeListeners.push(listener);
  }

  /** Waits for registration, then configures the plugin; closes it on any failure. */
  async start(runtimeName: string, runtimeVersion: string): Promise<void> {
    try {
      await this.awaitRegistration();
      await this.configure(runtimeName, runtimeVersion);
    } catch (err) {
      this.close(`failed to start: ${(err as Error).message}`);
      throw err;
    }
  }

  private awaitRegistration(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.registered = undefined;
        reject(new Error(`plugin registration timed out after ${this.options.timeouts.registrationMs} ms`));
      }, this.options.timeouts.registrationMs);
      this.onClose(() => reject(new Error('connection closed before the plugin registered')));
      this.registered = (err) => {
        clearTimeout(timer);
        this.registered = undefined;
        if (err) reject(err);
        else resolve();
      };
    });
  }

  private onRegister(name: string, idx: string): void {
    const done = this.registered;
    if (!done) throw new TtrpcHandlerError(Code.InvalidArgument, 'plugin already registered');
    if (this.external) {
      if (!name) {
        done(new Error('plugin registered an empty name'));
        throw new TtrpcHandlerError(Code.InvalidArgument, 'invalid (empty) plugin name');
      }
      if (!isPluginIndex(idx)) {
        done(new Error(`plugin "${name}" registered invalid index "${idx}"`));
        throw new TtrpcHandlerError(Code.InvalidArgument, `invalid plugin index "${idx}", must be 2 digits`);
      }
      this.baseName = name;
      this.index = idx;
    }
    this.log = this.options.log.child({ plugin: this.name });
    this.log.info('NRI plugin registered', { kind: this.kind, pid: this.pid });
    this.isRegistered = true;
    done();
  }

  private async configure(runtimeName: string, runtimeVersion: string): Promise<void> {
    const rpl = await callMethod(
      this.client,
      PluginService.configure,
      {
        config: this.options.launched?.config ?? '',
        runtimeName,
        runtimeVersion,
        registrationTimeout: BigInt(this.options.timeouts.registrationMs),
        requestTimeout: BigInt(this.options.timeouts.requestMs),
      },
      this.options.timeouts.requestMs,
    ).catch((err: Error) => {
      throw failedPrecondition(`failed to configure plugin: ${err.message}`);
    });
    if (rpl.events & ~VALID_EVENTS) throw failedPrecondition(`invalid plugin events: 0x${(rpl.events & ~VALID_EVENTS).toString(16)}`);
    this.events = rpl.events === 0 ? VALID_EVENTS : rpl.events;
  }

  /**
   * Sends every pod and container; messages over ttrpc's size limit are split, and a plugin must then
   * acknowledge each part before the last without updates (as NRI's stub does).
   */
  async synchronize(pods: PodSandbox[], containers: Container[]): Promise<ContainerUpdate[]> {
    const parts = splitSync(pods, containers);
    let updates: ContainerUpdate[] = [];
    for (const [i, part] of parts.entries()) {
      const more = i < parts.length - 1;
      const rpl = await this.call('Synchronize', () =>
        callMethod(this.client, PluginService.synchronize, { ...part, more }, this.options.timeouts.requestMs),
      );
      if (more && (rpl.update.length > 0 || rpl.more !== more)) {
        this.close('plugin does not handle split sync requests');
        throw failedPrecondition('plugin does not handle split sync requests');
      }
      updates = rpl.update;
    }
    return updates;
  }

  /** undefined: not subscribed, or the plugin was dropped on the way. */
  createContainer(req: CreateContainerRequest): Promise<CreateContainerResponse | undefined> {
    if (!this.wants(Event.CREATE_CONTAINER)) return Promise.resolve(undefined);
    return this.event('CreateContainer', () => callMethod(this.client, PluginService.createContainer, req, this.options.timeouts.requestMs));
  }

  updateContainer(req: UpdateContainerRequest): Promise<UpdateContainerResponse | undefined> {
    if (!this.wants(Event.UPDATE_CONTAINER)) return Promise.resolve(undefined);
    return this.event('UpdateContainer', () => callMethod(this.client, PluginService.updateContainer, req, this.options.timeouts.requestMs));
  }

  stopContainer(req: StopContainerRequest): Promise<StopContainerResponse | undefined> {
    if (!this.wants(Event.STOP_CONTAINER)) return Promise.resolve(undefined);
    return this.event('StopContainer', () => callMethod(this.client, PluginService.stopContainer, req, this.options.timeouts.requestMs));
  }

  async stateChange(evt: StateChangeEvent): Promise<void> {
    if (!this.wants(evt.event)) return;
    await this.event(`event ${evt.event}`, () => callMethod(this.client, PluginService.stateChange, evt, this.options.timeouts.requestMs));
  }

  /** Tells the plugin the runtime is going away (best effort, bounded). */
  async shutdown(): Promise<void> {
    if (this.closed) return;
    await callMethod(this.client, PluginService.shutdown, {}, Math.min(this.options.timeouts.requestMs, 1000)).catch(() => undefined);
  }

  /** Closes the connection and ends a pre-launched plugin's process. */
  close(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.log.warn('NRI plugin closed', { reason });
    const err = new Error(reason);
    this.client.close(err);
    this.server.close(err);
    this.mux.close();
    const child = this.options.launched?.child;
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    for (const l of this.closeListeners.splice(0)) l();
  }

  private wants(event: number): boolean {
    return !this.closed && (this.events & eventBit(event)) !== 0;
  }

  /** A call whose fatal failure (timeout, gone) closes the plugin and answers undefined. */
  private async event<T>(what: string, call: () => Promise<T>): Promise<T | undefined> {
    try {
      return await call();
    } catch (err) {
      if (err instanceof TtrpcFatalError) {
        this.close(`failed to handle ${what}: ${err.message}`);
        return undefined;
      }
      throw err;
    }
  }

  /** A call whose every failure closes the plugin. */
  private async call<T>(what: string, call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (err) {
      this.close(`failed to handle ${what}: ${(err as Error).message}`);
      throw err;
    }
  }
}

/** Splits the sync payload so that no message exceeds ttrpc's limit (with room for the envelope). */
export function splitSync(pods: PodSandbox[], containers: Container[], limit = TTRPC_MAX_MESSAGE - 64 * 1024): { pods: PodSandbox[]; containers: Container[] }[] {
  const parts: { pods: PodSandbox[]; containers: Container[] }[] = [];
  let current = { pods: [] as PodSandbox[], containers: [] as Container[] };
  let size = 0;
  const add = (kind: 'pods' | 'containers', item: PodSandbox | Container, bytes: number) => {
    if (size + bytes > limit && size > 0) {
      parts.push(current);
      current = { pods: [], containers: [] };
      size = 0;
    }
    (current[kind] as (PodSandbox | Container)[]).push(item);
    size += bytes;
  };
  for (const p of pods) add('pods', p, SynchronizeRequest.encode(SynchronizeRequest.fromPartial({ pods: [p] })).finish().length);
  for (const c of containers) add('containers', c, SynchronizeRequest.encode(SynchronizeRequest.fromPartial({ containers: [c] })).finish().length);
  parts.push(current);
  return parts;
}
