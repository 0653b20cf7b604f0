/**
 * An NRI plugin for tests, speaking the protocol over a real socket: NRI's mux, the Runtime service
 * called on connection 2, the Plugin service served on connection 1. It records every request it gets
 * and answers with what the test sets. Its framing is Stove's own (src/nri), which the unit tests check
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
  type ContainerUpdate,
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
}

type Answer<Req, Res> = (req: Req) => Res | Promise<Res>;

export interface TestPluginOptions {
  name: string;
  index: string;
  /** Events to subscribe to; all when empty. */
  events?: Event[];
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
        this.seen.push({ event: 'Synchronize', pod: '', container: '' });
        return this.onSynchronize(req);
      }),
    );
    serveMethod(this.fromRuntime, PluginService.shutdown, async () => {
      this.seen.push({ event: 'Shutdown', pod: '', container: '' });
      return {};
    });
    serveMethod(
      this.fromRuntime,
      PluginService.createContainer,
      guard(async (req) => {
        this.creates.push(req);
        this.seen.push({ event: 'CreateContainer', pod: req.pod?.id ?? '', container: req.container?.id ?? '' });
        return this.onCreate(req);
      }),
    );
    serveMethod(
      this.fromRuntime,
      PluginService.updateContainer,
      guard(async (req) => {
        this.updates.push(req);
        this.seen.push({ event: 'UpdateContainer', pod: req.pod?.id ?? '', container: req.container?.id ?? '' });
        return this.onUpdate(req);
      }),
    );
    serveMethod(
      this.fromRuntime,
      PluginService.stopContainer,
      guard(async (req) => {
        this.seen.push({ event: 'StopContainer', pod: req.pod?.id ?? '', container: req.container?.id ?? '' });
        return this.onStop(req);
      }),
    );
    serveMethod(
      this.fromRuntime,
      PluginService.stateChange,
      guard(async (req) => {
        this.seen.push({ event: eventName(req.event), pod: req.pod?.id ?? '', container: req.container?.id ?? '' });
        await this.onStateChange(req);
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
    return callMethod(this.toRuntime, RuntimeService.registerPlugin, { pluginName: this.o.name, pluginIdx: this.o.index }, 5000);
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
