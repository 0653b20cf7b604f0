/**
 * The composition root: the only place that creates Stove's services and wires them together. Every
 * other module receives what it needs through its constructor.
 */
import { readFileSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { durationMs, type Config } from './config/schema.js';
// NRI (on unless `[nri] enable = false`) is imported when enabled: its protocol code (about 8 MiB of RSS) is not loaded otherwise.
import type { NriAdaptation, NriHost } from './nri/adaptation.js';
import type { NriLifecycle } from './nri/lifecycle.js';
import type { Logger, RootLogger } from './common/logger.js';
import { planReload } from './config/reload.js';
import { criServices } from './api/services.js';
import { ensureSocketFree, serveGrpc, type GrpcEndpoint } from './api/server.js';
import { lockStateDir, type StateLock } from './persist/state-lock.js';
import { RuntimeInfo, describeRuntimeHandlers } from './cri/runtime-info.js';
import { imageHandlers, runtimeHandlers, type CriServices } from './cri/rpc-table.js';
import { PodNetworkManager } from './network/pod-network.js';
import { checkpointDirs, nriStatusFile, pathsFor, type Paths } from './config/paths.js';
import { CriuProbe } from './checkpoint/criu.js';
import { SEARCH_ONLY_DIR, tightenPodDirs, tightenStateTrees } from './persist/tree-modes.js';
import { Quarantine } from './persist/quarantine.js';
import { podRootGid } from './sandbox/model.js';
import { ImageService, imageParts, type ImageServiceOptions } from './images/image-service.js';
import { ImageStores } from './images/image-stores.js';
import { Monitor } from './monitor/monitor.js';
import { ExitWatcher } from './monitor/exits.js';
import { detectSpecSettings, reloadSpecSettings } from './oci/index.js';
import { SandboxStore } from './sandbox/store.js';
import { SandboxService } from './sandbox/service.js';
import { SandboxRunner } from './sandbox/run.js';
import { CgroupParentUsers } from './sandbox/cgroup-parents.js';
import { DEFAULT_HANDLER, RuntimeHandlerSet } from './runtime/handlers.js';
import { ConmonPauseRuntime } from './sandbox/pause.js';
import { installPauseRootfs } from './sandbox/pause-rootfs.js';
import { LinuxSandboxHost } from './sandbox/host.js';
import { MetricsReader } from './stats/metrics.js';
import { ContainerStore } from './container/store.js';
import { ContainerService } from './container/service.js';
import type { ContainerServiceOptions } from './container/deps.js';
import { StatsReader } from './stats/stats.js';
import { recheckExits, recoverContainers } from './container/recover.js';
import { detectCgroups } from './platform/cgroups.js';
import { LifecycleEvents } from './pod/events.js';
import { PodLifecycle } from './pod/lifecycle.js';
import { StreamingServer, streamingOptionsFromConfig } from './streaming/server.js';
import { CriStreamingBackend, streamingLookup } from './streaming/container-backend.js';
import { CdiRegistry, runtimeSupportFrom } from './cdi/index.js';
import { OciHookRegistry } from './oci-hooks/index.js';
import { cdiEditor, ociHooksEditor } from './container/spec-editors.js';
import { startObservability, type Observability } from './observability/start.js';
import type { Telemetry } from './observability/hooks.js';
import { failedPrecondition, messageOf } from './common/errors.js';
import { DEFAULT_SPAWN_HELPER, helperBinariesMissing } from './platform/spawn-helper.js';
import { DEFAULT_MOUNT_HELPER } from './platform/mount-helper.js';
import { DEFAULT_RELAY_PATH } from './monitor/attach.js';
import { installPath } from './common/install-dir.js';

/** Stove's version, from package.json. */
export function stoveVersion(): string {
  const pkg = JSON.parse(readFileSync(installPath('package.json'), 'utf8')) as { version: string };
  return pkg.version;
}

/** What a config reload did: keys applied live, and changed keys that wait for a restart. */
export interface ReloadReport {
  applied: string[];
  needsRestart: string[];
}

/** The NRI adaptation over the config's `[nri]` table, serving `host`'s pods and containers, started. */
async function startNri(config: Config, lifecycle: NriLifecycle, host: NriHost, log: Logger): Promise<NriAdaptation> {
  const { NriAdaptation } = await import('./nri/adaptation.js');
  const nri = new NriAdaptation({
    socketPath: config.nri.socketPath,
    pluginPath: config.nri.pluginPath,
    pluginConfigPath: config.nri.pluginConfigPath,
    disableConnections: config.nri.disableConnections,
    timeouts: { registrationMs: durationMs(config.nri.pluginRegistrationTimeout)!, requestMs: durationMs(config.nri.pluginRequestTimeout)! },
    statusFile: nriStatusFile(config),
    defaultValidator: config.nri.defaultValidator,
    runtimeName: 'stove',
    runtimeVersion: stoveVersion(),
    host,
    log,
  });
  lifecycle.attach(nri);
  // Reads every recovered container's spec once, so that events describe them fully from the start.
  await host.snapshot();
  await nri.start();
  return nri;
}

/** A running daemon. */
export interface Daemon {
  readonly endpoint: GrpcEndpoint;
  /**
   * Applies a new configuration's live keys (config/reload.ts) to work that starts from now on;
   * running containers are not touched. `next` has been loaded and validated already.
   */
  reload(next: Config): ReloadReport;
  /** Drains the API, then stops background work. */
  stop(): Promise<void>;
}

/** Builds every service, recovers state from disk, and serves the CRI on the configured socket. */
export async function startDaemon(config: Config, log: RootLogger): Promise<Daemon> {
  // The programs `make build` makes beside the daemon: without them it would start and fail later.
  const missing = helperBinariesMissing([DEFAULT_SPAWN_HELPER, DEFAULT_MOUNT_HELPER, DEFAULT_RELAY_PATH]);
  if (missing.length) throw failedPrecondition(`helper programs missing: ${missing.join(', ')} (make build builds them)`);
  await mkdir(config.state, { recursive: true, mode: SEARCH_ONLY_DIR });
  // Before recovery touches anything: refuse while another daemon owns this state dir or socket.
  const lock = await lockStateDir(config.state);
  // Metrics and tracing first, so recovery and every call after it are counted.
  const observability = await startObservability(config, stoveVersion(), log.child({ module: 'observability' }));
  try {
    await ensureSocketFree(config.socket);
    // Trees an older Stove made readable by every host user are closed before anything else runs.
    const tightened = await tightenStateTrees(config.root, config.state);
    if (tightened) log.info('closed state dirs and records to unprivileged users', { root: config.root, state: config.state, changed: tightened });
    return await buildAndServe(config, log, lock, observability);
  } catch (err) {
    await observability.stop();
    await lock.release();
    throw err;
  }
}

/** The volatile dirs of recovered pods and containers get their access (tree-modes.ts); others root's alone. */
async function tightenRecoveredPodDirs(state: string, paths: Paths, sandboxes: SandboxService, containers: ContainerService, log: Logger): Promise<void> {
  const gids = new Map(sandboxes.list().map((s) => [s.id, podRootGid(s.userns)]));
  const changed = await tightenPodDirs(state, [
    ...sandboxes.list().map((s) => ({ path: paths.sandboxStateDir(s.id), podGid: gids.get(s.id) })),
    ...containers.list().map((c) => ({ path: c.bundleDir, podGid: gids.get(c.sandboxId) })),
  ]);
  if (changed) log.info('set the access of pod and container state dirs', { changed });
}

/** What every builder reads: the configuration, the paths it gives, the root logger, and metrics and tracing. */
interface BuildContext {
  config: Config;
  paths: Paths;
  log: RootLogger;
  /** observability/start.ts's: what services report to (no-ops for what is off). */
  telemetry: Telemetry;
}

/** Unreadable records go here, and what they describe is left alone (persist/quarantine.ts). */
async function openQuarantine({ paths, log }: BuildContext): Promise<Quarantine> {
  const quarantine = new Quarantine(paths.quarantineDir, log.child({ module: 'quarantine' }));
  await quarantine.load();
  return quarantine;
}

/**
 * The image stores, loaded (their unreadable records to `quarantine`): the shared one, and one for each
 * runtime handler configured with an `image_store` of its own.
 */
async function openImages({ config, paths, log, telemetry }: BuildContext, quarantine: Quarantine): Promise<ImageStores> {
  const open = (imagesDir: string, runtimeHandler: string) => {
    const options: ImageServiceOptions = {
      quarantine,
      imagesDir,
      stateDir: config.state,
      containerDir: paths.containerDir,
      writableLayersDir: config.images.writableLayersDir,
      maxConcurrentDownloads: config.images.maxConcurrentDownloads,
      stallTimeoutSeconds: config.images.stallTimeoutSeconds,
      maxLayerSize: config.images.maxLayerSize,
      maxImageSize: config.images.maxImageSize,
      minFreeSpace: config.images.minFreeSpace,
      certsDirs: config.images.certsDirs,
      signaturePolicy: config.images.signaturePolicy,
      signaturePolicyDir: config.images.signaturePolicyDir,
      registries: config.registries,
      pinnedImages: config.images.pinned,
      telemetry,
      log: log.child({ module: 'images', ...(runtimeHandler ? { runtimeHandler } : {}) }),
    };
    return ImageService.open(options, imageParts(options));
  };
  const shared = await open(paths.imagesDir, '');
  const own = new Map<string, ImageService>();
  for (const [name, handler] of Object.entries(config.runtime.handlers)) {
    if (handler.imageStore) own.set(name, await open(handler.imageStore, name));
  }
  return new ImageStores({ shared, own, handlers: [DEFAULT_HANDLER, ...Object.keys(config.runtime.handlers).filter((n) => n !== DEFAULT_HANDLER && n !== '')] });
}

/** What runs containers: the OCI runtimes, conmon, and the spec settings detected on this host. */
async function buildRuntime({ config, paths, log }: BuildContext) {
  const runtimes = new RuntimeHandlerSet({
    runc: { binary: config.runtime.runc, root: paths.runcRoot },
    handlers: config.runtime.handlers,
    systemdCgroup: config.runtime.cgroupDriver === 'systemd',
    log: log.child({ module: 'runtime' }),
  });
  const monitor = new Monitor({
    conmon: config.runtime.conmon,
    exitsDir: paths.exitsDir,
    attachDir: paths.attachDir,
    execDir: paths.execDir,
    log: log.child({ module: 'monitor' }),
  });
  const handlerFeatures = await describeRuntimeHandlers(runtimes);
  const specSettings = await detectSpecSettings(
    {
      defaultCapabilities: config.runtime.defaultCapabilities,
      cgroupDriver: config.runtime.cgroupDriver,
      seccompProfile: config.runtime.seccompProfile,
      apparmorDefaultProfile: config.runtime.apparmorDefaultProfile,
      runtimeSupportsRro: handlerFeatures[0]?.features?.recursiveReadOnlyMounts ?? false,
      pidsLimit: config.runtime.pidsLimit,
      defaultUlimits: config.runtime.defaultUlimits,
      allowedAnnotations: config.runtime.allowedAnnotations,
      imageVolumes: config.runtime.imageVolumes,
      deviceOwnershipFromSecurityContext: config.runtime.deviceOwnershipFromSecurityContext,
    },
    log.child({ module: 'spec' }),
  );
  return { runtimes, monitor, handlerFeatures, specSettings, cgroups: await detectCgroups(), criu: new CriuProbe() };
}

type Runtime = Awaited<ReturnType<typeof buildRuntime>>;

/** Pods: their network, the sandbox service and RunPodSandbox's runner over one set of options. */
async function buildSandboxes({ config, paths, log, telemetry }: BuildContext, { runtimes, monitor, specSettings }: Runtime, quarantine: Quarantine) {
  const podNetwork = new PodNetworkManager({
    ...config.network,
    netnsDir: paths.netnsDir,
    cacheDir: paths.cniCacheDir,
    log: log.child({ module: 'network' }),
  });
  const store = new SandboxStore(config.root, quarantine);
  const options = {
    store,
    sandboxStateDir: paths.sandboxStateDir,
    network: podNetwork,
    pause: new ConmonPauseRuntime(monitor, runtimes),
    runtimes,
    host: new LinuxSandboxHost(),
    specSettings,
    pauseRootfs: await installPauseRootfs(config.state),
    defaults: { cgroupParent: config.runtime.cgroupParent, cgroupDriver: config.runtime.cgroupDriver },
    parentUsers: new CgroupParentUsers(() => store.list()),
    telemetry,
    log: log.child({ module: 'sandbox' }),
  };
  return { podNetwork, sandboxStore: store, sandboxes: new SandboxService(options), runner: new SandboxRunner(options) };
}

type Sandboxes = Awaited<ReturnType<typeof buildSandboxes>>;

/**
 * Containers, with what edits their specs (CDI, OCI hooks, NRI), and the one publisher of pod and
 * container events (each service sends its own through it).
 */
async function buildContainers(
  { config, paths, log, telemetry }: BuildContext,
  { runtimes, monitor, specSettings, cgroups, criu }: Runtime,
  { sandboxes, sandboxStore }: Sandboxes,
  images: ImageStores,
  quarantine: Quarantine,
) {
  const cdi = new CdiRegistry({ specDirs: config.cdi.specDirs, log: log.child({ module: 'cdi' }) });
  const ociHooks = new OciHookRegistry({ hooksDirs: config.runtime.hooksDirs, log: log.child({ module: 'oci-hooks' }) });
  // Read once now so that bad files are logged at start, not at the first container that wants them.
  await Promise.all([cdi.current(), ociHooks.current()]);
  // NRI plugins see and adjust containers through the container service's lifecycle (docs/nri.md). It
  // reads pods only; the container service it serves hands it the containers once built (startNri).
  const nriLifecycle = config.nri.enable
    ? new (await import('./nri/lifecycle.js')).NriLifecycle(
        sandboxes,
        {
          cgroups: specSettings.cgroups,
          injectCdiDevices: async (spec, names, handler) => {
            const runtime = runtimes.get(handler);
            await cdi.inject(spec, names, runtimeSupportFrom(runtime.binary, await runtime.features().catch(() => undefined)));
          },
        },
        log.child({ module: 'nri' }),
      )
    : undefined;
  const store = new ContainerStore(config.root, quarantine);
  const events = new LifecycleEvents({
    sandbox: (id) => sandboxStore.get(id),
    containersOf: (id) => store.ofSandbox(id),
    extensions: nriLifecycle,
    log: log.child({ module: 'events' }),
  });
  const options: ContainerServiceOptions = {
    store,
    sandboxes,
    images,
    monitor,
    runtimes,
    specSettings,
    specEditors: [cdiEditor(cdi, log.child({ module: 'cdi' })), ociHooksEditor(ociHooks)],
    cgroups,
    containerDir: paths.containerDir,
    containerStateDir: paths.containerStateDir,
    logSizeMax: config.runtime.logSizeMax,
    events,
    lifecycle: nriLifecycle,
    checkpoint: { dirs: checkpointDirs(config), criu, runtimeName: 'runc' },
    telemetry,
    log: log.child({ module: 'container' }),
  };
  await mkdir(paths.checkpointsDir, { recursive: true, mode: 0o700 });
  return { containers: new ContainerService(options), containerOptions: options, events, nriLifecycle };
}

/**
 * Recovery before the API answers: the exit watcher first (each exit goes to the module that owns the
 * ID), so no exit falls between reading and watching; then the pods, then the containers.
 */
async function recover(
  { config, paths, log, telemetry }: BuildContext,
  pods: PodLifecycle,
  sandboxes: SandboxService,
  containers: ContainerService,
  containerOptions: ContainerServiceOptions,
): Promise<ExitWatcher> {
  const exits = new ExitWatcher({ exitsDir: paths.exitsDir, onExit: (exit) => pods.routeExit(exit), log: log.child({ module: 'exits' }) });
  const started = performance.now();
  await exits.start();
  await pods.recover();
  await recoverContainers(containers, containerOptions);
  // Exits that came between the watcher's start and the containers' load were not theirs yet.
  await recheckExits(containers, containerOptions);
  await tightenRecoveredPodDirs(config.state, paths, sandboxes, containers, log);
  telemetry.metrics.recovered((performance.now() - started) / 1000);
  return exits;
}

/** The exec/attach/port-forward server, listening: Exec, Attach and PortForward hand out its URLs. */
async function startStreaming({ config, log }: BuildContext, { monitor }: Runtime, sandboxes: SandboxService, containers: ContainerService) {
  const deps = { containers, sandboxes, monitor, log: log.child({ module: 'streaming' }) };
  const backend = new CriStreamingBackend(deps);
  const streaming = new StreamingServer({ ...streamingOptionsFromConfig(config.streaming), backend, lookup: streamingLookup(deps), log: deps.log });
  await streaming.start();
  return { streaming, backend };
}

/** The metrics listener, then the CRI on the socket; the streaming server stops if either fails. */
async function serve({ config, log, telemetry }: BuildContext, observability: Observability, services: CriServices, quarantine: Quarantine): Promise<GrpcEndpoint> {
  const { containers, sandboxes, images, streaming } = services;
  try {
    await observability.listen({
      containerStates: () => containers.list().map((c) => c.state),
      podSandboxStates: () => sandboxes.list().map((s) => s.state),
      imageCount: () => images.count(),
      streamingSessions: () => streaming.sessionsByKind(),
      quarantinedRecords: () => quarantine.list().length,
    });
    return await serveGrpc(config.socket, criServices(runtimeHandlers(services), imageHandlers(services), log.child({ module: 'api' }), telemetry), log);
  } catch (err) {
    await streaming.stop();
    throw err;
  }
}

/** Everything after the lock: services, recovery, the API. */
async function buildAndServe(config: Config, log: RootLogger, lock: StateLock, observability: Observability): Promise<Daemon> {
  const ctx: BuildContext = { config, paths: pathsFor(config), log, telemetry: observability.telemetry };
  const quarantine = await openQuarantine(ctx);
  const images = await openImages(ctx, quarantine);
  const runtime = await buildRuntime(ctx);
  const pod = await buildSandboxes(ctx, runtime, quarantine);
  const { sandboxes, podNetwork } = pod;
  const { containers, containerOptions, events, nriLifecycle } = await buildContainers(ctx, runtime, pod, images, quarantine);
  const pods = new PodLifecycle({ runner: pod.runner, sandboxes, containers, events, extensions: nriLifecycle });
  const exits = await recover(ctx, pods, sandboxes, containers, containerOptions);
  // Plugins register and are synchronized with the recovered pods before the API answers.
  const nri = nriLifecycle ? await startNri(config, nriLifecycle, nriLifecycle.host(containers), log.child({ module: 'nri' })) : undefined;
  const info = new RuntimeInfo({
    config,
    version: stoveVersion(),
    log: log.child({ module: 'runtime-info' }),
    networkReadiness: () => podNetwork.readiness(),
    runtimeHandlers: () => runtime.handlerFeatures,
    quarantine: () => quarantine.list(),
    checkpointSupport: () => runtime.criu.support(),
  });
  const { streaming, backend: streamingBackend } = await startStreaming(ctx, runtime, sandboxes, containers);
  const usage = { cgroups: runtime.cgroups, images };
  const stats = new StatsReader({ ...usage, log: log.child({ module: 'stats' }) });
  const criMetrics = new MetricsReader({ ...usage, log: log.child({ module: 'metrics' }) });
  const services: CriServices = { info, pods, sandboxes, containers, images, streaming, stats, metrics: criMetrics, events };
  const endpoint = await serve(ctx, observability, services, quarantine);

  let current = config;
  return {
    endpoint,
    reload(next) {
      // Live keys against the last config applied; the others against the start-up config in force.
      const applied = planReload(current, next).live;
      const needsRestart = planReload(config, next).restart;
      applyLiveKeys(next, { log, images, specSettings: runtime.specSettings, containers, podNetwork, observability });
      current = next;
      return { applied, needsRestart };
    },
    async stop() {
      events.close();
      await endpoint.shutdown();
      // Ends live exec/attach/port-forward sessions: their exec'd processes are killed.
      await streaming.stop();
      await streamingBackend.drain();
      exits.stop();
      await nri?.stop();
      await images.close();
      await observability.stop();
      await lock.release();
    },
  };
}

/** What a reload changes live (config/reload.ts lists the keys), for work that starts from now on. */
function applyLiveKeys(
  next: Config,
  live: { log: RootLogger; images: ImageStores; specSettings: Runtime['specSettings']; containers: ContainerService; podNetwork: PodNetworkManager; observability: Observability },
): void {
  live.log.setLevel(next.logLevel);
  live.images.setRegistries(next.registries);
  live.images.setPinned(next.images.pinned);
  live.images.setTrust(next.images);
  // The spec builders read the live settings object at each create.
  reloadSpecSettings(live.specSettings, {
    pidsLimit: next.runtime.pidsLimit,
    defaultUlimits: next.runtime.defaultUlimits,
    allowedAnnotations: next.runtime.allowedAnnotations,
    imageVolumes: next.runtime.imageVolumes,
    deviceOwnershipFromSecurityContext: next.runtime.deviceOwnershipFromSecurityContext,
  });
  live.containers.setLogSizeMax(next.runtime.logSizeMax);
  live.podNetwork.rescanConfig();
  // The listener moves and tracers swap in the background; a failure keeps what was running.
  live.observability.reconfigure(next).catch((err: unknown) => live.log.error('cannot apply the new metrics or tracing settings', { error: messageOf(err) }));
}
