/**
 * An NRI plugin for tests, speaking the protocol over a real socket: NRI's mux, the Runtime service
 * called on connection 2, the Plugin service served on connection 1. It records every request it gets
 * and answers with what the test sets. It speaks NRI v0.8 (notifications as StateChange, Unimplemented for
 * the per-event methods) or, with `protocol: 'v0.12'`, v0.12 (a method per event). Its framing is Stove's own (src/nri), which the unit tests check
 * byte for byte against hand-built frames.
 */
import { connect, type Socket } from 'node:net';
import {
  ConfigureResponse,
  CreateContainerResponse,
  Event,
  PluginService,
  RuntimeService,
  StopContainerResponse,
  SynchronizeResponse,
  UpdateContainerResponse,
  type ConfigureRequest,
  type Container,
  type ContainerUpdate,
  type UpdatePodSandboxRequest,
  type PodSandbox,
  type CreateContainerRequest,
  type StateChangeEvent,
  type StopContainerRequest,
  type SynchronizeRequest,
  type UpdateContainerRequest,
  type UpdateContainersResponse,
} from '../../src/gen/nri/api.js';
import { Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN } from '../../src/nri/mux.js';
import { callMethod, serveMethod, TtrpcChannel, TtrpcHandlerError } from '../../src/nri/ttrpc.js';

/** One request the plugin got: the event name and the pod and container IDs it was about. */
export interface SeenEvent {
  event: string;
  pod: string;
  container: string;
  /** How it came: its own method, or StateChange. */
  via: 'method' | 'StateChange';
}

type Answer<Req, Res> = (req: Req) => Res | Promise<Res>;

export interface TestPluginOptions {
  name: string;
  index: string;
  /** Events to subscribe to; all when empty. */
  events?: Event[];
  /** The protocol the plugin speaks; v0.8 when unset. */
  protocol?: 'v0.8' | 'v0.12';
}

export class TestPlugin {
  readonly seen: SeenEvent[] = [];
  configure: ConfigureRequest | undefined;
  readonly syncs: SynchronizeRequest[] = [];
  readonly creates: CreateContainerRequest[] = [];
  readonly updates: UpdateContainerRequest[] = [];
  onCreate: Answer<CreateContainerRequest, CreateContainerResponse> = () => CreateContainerResponse.fromPartial({});
  onUpdate: Answer<UpdateContainerRequest, UpdateContainerResponse> = () => UpdateContainerResponse.fromPartial({});
  onStop: Answer<StopContainerRequest, StopContainerResponse> = () => StopContainerResponse.fromPartial({});
  onSynchronize: Answer<SynchronizeRequest, SynchronizeResponse> = (req) => SynchronizeResponse.fromPartial({ more: req.more });
  onStateChange: Answer<StateChangeEvent, void> = () => {};
  onConfigure: Answer<ConfigureRequest, void> = () => {};
  onUpdatePod: Answer<UpdatePodSandboxRequest, void> = () => {};
  readonly podUpdates: UpdatePodSandboxRequest[] = [];
  /** Containers as the per-event methods and StateChange carried them, by event name. */
  readonly containersSeen: { event: string; container: Container }[] = [];
  private readonly mux: Mux;
  private readonly toRuntime: TtrpcChannel;
  private readonly fromRuntime: TtrpcChannel;
  private closedResolve!: () => void;
  /** Resolves when the runtime closes the connection (or it breaks). */
  readonly closed = new Promise<void>((r) => (this.closedResolve = r));

  constructor(
    readonly socket: Socket,
    private readonly o: TestPluginOptions,
  ) {
    this.mux = new Mux(socket);
    const fail = (err: Error) => this.mux.close(err);
    this.fromRuntime = new TtrpcChannel((b) => this.mux.write(PLUGIN_SERVICE_CONN, b), fail);
    this.toRuntime = new TtrpcChannel((b) => this.mux.write(RUNTIME_SERVICE_CONN, b), fail);
    this.mux.open(PLUGIN_SERVICE_CONN, (d) => this.fromRuntime.receive(d));
    this.mux.open(RUNTIME_SERVICE_CONN, (d) => this.toRuntime.receive(d));
    this.mux.onClose(() => {
      this.toRuntime.close(new Error('closed'));
      this.fromRuntime.close(new Error('closed'));
      this.closedResolve();
    });
    const guard =
      <Req, Res>(fn: (req: Req) => Res | Promise<Res>) =>
      async (req: Req): Promise<Res> => {
        try {
          return await fn(req);
        } catch (err) {
          throw new TtrpcHandlerError(2, (err as Error).message);
        }
      };
    serveMethod(
      this.fromRuntime,
      PluginService.configure,
      guard(async (req) => {
        this.configure = req;
        await this.onConfigure(req);
        const mask = (this.o.events ?? []).reduce((m, e) => m | (1 << (e - 1)), 0);
        return ConfigureResponse.fromPartial({ events: mask });
      }),
    );
    serveMethod(
      this.fromRuntime,
      PluginService.synchronize,
      guard(async (req) => {
        this.syncs.push(req);
        this.seen.push({ event: 'Synchronize', pod: '', container: '', via: 'method' });
        return this.onSynchronize(req);
      }),
    );
    serveMethod(this.fromRuntime, PluginService.shutdown, async () => {
      this.seen.push({ event: 'Shutdown', pod: '', container: '', via: 'method' });
      return {};
    });
    serveMethod(
      this.fromRuntime,
      PluginService.createContainer,
      guard(async (req) => {
        this.creates.push(req);
        this.seen.push({ event: 'CreateContainer', pod: req.pod?.id ?? '', container: req.container?.id ?? '', via: 'method' });
        return this.onCreate(req);
      }),
    );
    serveMethod(
      this.fromRuntime,
      PluginService.updateContainer,
      guard(async (req) => {
        this.updates.push(req);
        this.seen.push({ event: 'UpdateContainer', pod: req.pod?.id ?? '', container: req.container?.id ?? '', via: 'method' });
        return this.onUpdate(req);
      }),
    );
    serveMethod(
      this.fromRuntime,
      PluginService.stopContainer,
      guard(async (req) => {
        this.seen.push({ event: 'StopContainer', pod: req.pod?.id ?? '', container: req.container?.id ?? '', via: 'method' });
        return this.onStop(req);
      }),
    );
    serveMethod(
      this.fromRuntime,
      PluginService.stateChange,
      guard(async (req) => {
        this.seen.push({ event: eventName(req.event), pod: req.pod?.id ?? '', container: req.container?.id ?? '', via: 'StateChange' });
        if (req.container) this.containersSeen.push({ event: eventName(req.event), container: req.container });
        await this.onStateChange(req);
        return {};
      }),
    );
    if (o.protocol === 'v0.12') this.servePerEvent(guard);
  }

  private servePerEvent(guard: <Req, Res>(fn: (req: Req) => Res | Promise<Res>) => (req: Req) => Promise<Res>): void {
    const note = (event: Event) => async (req: { pod?: PodSandbox | undefined; container?: Container | undefined }) => {
      this.seen.push({ event: eventName(event), pod: req.pod?.id ?? '', container: req.container?.id ?? '', via: 'method' });
      if (req.container) this.containersSeen.push({ event: eventName(event), container: req.container });
      await this.onStateChange({ event, pod: req.pod, container: req.container });
      return {};
    };
    serveMethod(this.fromRuntime, PluginService.runPodSandbox, guard(note(Event.RUN_POD_SANDBOX)));
    serveMethod(this.fromRuntime, PluginService.stopPodSandbox, guard(note(Event.STOP_POD_SANDBOX)));
    serveMethod(this.fromRuntime, PluginService.removePodSandbox, guard(note(Event.REMOVE_POD_SANDBOX)));
    serveMethod(this.fromRuntime, PluginService.postUpdatePodSandbox, guard(note(Event.POST_UPDATE_POD_SANDBOX)));
    serveMethod(this.fromRuntime, PluginService.postCreateContainer, guard(note(Event.POST_CREATE_CONTAINER)));
    serveMethod(this.fromRuntime, PluginService.startContainer, guard(note(Event.START_CONTAINER)));
    serveMethod(this.fromRuntime, PluginService.postStartContainer, guard(note(Event.POST_START_CONTAINER)));
    serveMethod(this.fromRuntime, PluginService.postUpdateContainer, guard(note(Event.POST_UPDATE_CONTAINER)));
    serveMethod(this.fromRuntime, PluginService.removeContainer, guard(note(Event.REMOVE_CONTAINER)));
    serveMethod(
      this.fromRuntime,
      PluginService.updatePodSandbox,
      guard(async (req: UpdatePodSandboxRequest) => {
        this.podUpdates.push(req);
        this.seen.push({ event: 'UpdatePodSandbox', pod: req.pod?.id ?? '', container: '', via: 'method' });
        await this.onUpdatePod(req);
        return {};
      }),
    );
  }

  /** Connects to the runtime's NRI socket and registers. */
  static async connect(socketPath: string, o: TestPluginOptions): Promise<TestPlugin> {
    const socket = await new Promise<Socket>((resolve, reject) => {
      const s = connect(socketPath, () => resolve(s));
      s.once('error', reject);
    });
    const plugin = new TestPlugin(socket, o);
    await plugin.register();
    return plugin;
  }

  register(): Promise<unknown> {
    return callMethod(this.toRuntime, RuntimeService.registerPlugin, { pluginName: this.o.name, pluginIdx: this.o.index, NRIVersion: this.o.protocol === 'v0.12' ? 'v0.12.3' : '' }, 5000);
  }

  /** Unsolicited updates (the Runtime service's UpdateContainers). */
  updateContainers(update: ContainerUpdate[]): Promise<UpdateContainersResponse> {
    return callMethod(this.toRuntime, RuntimeService.updateContainers, { update, evict: [] }, 10_000);
  }

  /** Events seen for one container or pod, by name. */
  eventsFor(id: string): string[] {
    return this.seen.filter((e) => e.container === id || (e.pod === id && !e.container)).map((e) => e.event);
  }

  close(): void {
    this.mux.close();
  }
}

/** `RUN_POD_SANDBOX` → `RunPodSandbox`. */
export function eventName(e: Event): string {
  return Event[e]
    .toLowerCase()
    .split('_')
    .map((w) => w[0].toUpperCase() + w.slice(1))
    .join('');
}
