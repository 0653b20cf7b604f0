/**
 * The RPC → handler table: each CRI RPC to the function of the file named after it (`RunPodSandbox`
 * → run-pod-sandbox.ts), with the services it needs. Every RPC of CRI v1 (Kubernetes 1.36) has a
 * handler; tsc refuses a missing one.
 */
import type { ImageHandlers, RuntimeHandlers } from '../api/handlers.js';
import type { ContainerService } from '../container/service.js';
import type { ImageStores } from '../images/image-stores.js';
import type { LifecycleEvents } from '../pod/events.js';
import type { PodLifecycle } from '../pod/lifecycle.js';
import type { SandboxService } from '../sandbox/service.js';
import type { MetricsReader } from '../stats/metrics.js';
import type { StatsReader } from '../stats/stats.js';
import type { StreamingServer } from '../streaming/server.js';
import type { RuntimeInfo } from './runtime-info.js';
import { attach } from './attach.js';
import { checkpointContainer } from './checkpoint-container.js';
import { containerStats } from './container-stats.js';
import { containerStatus } from './container-status.js';
import { createContainer } from './create-container.js';
import { exec } from './exec.js';
import { execSync } from './exec-sync.js';
import { getContainerEvents } from './get-container-events.js';
import { imageFsInfo } from './image-fs-info.js';
import { imageStatus } from './image-status.js';
import { listContainerStats } from './list-container-stats.js';
import { listContainers } from './list-containers.js';
import { listImages } from './list-images.js';
import { listMetricDescriptors } from './list-metric-descriptors.js';
import { listPodSandbox } from './list-pod-sandbox.js';
import { listPodSandboxMetrics } from './list-pod-sandbox-metrics.js';
import { listPodSandboxStats } from './list-pod-sandbox-stats.js';
import { podSandboxStats } from './pod-sandbox-stats.js';
import { podSandboxStatus } from './pod-sandbox-status.js';
import { portForward } from './port-forward.js';
import { pullImage } from './pull-image.js';
import { removeContainer } from './remove-container.js';
import { removeImage } from './remove-image.js';
import { removePodSandbox } from './remove-pod-sandbox.js';
import { reopenContainerLog } from './reopen-container-log.js';
import { runPodSandbox } from './run-pod-sandbox.js';
import { runtimeConfig } from './runtime-config.js';
import { startContainer } from './start-container.js';
import { status } from './status.js';
import { stopContainer } from './stop-container.js';
import { stopPodSandbox } from './stop-pod-sandbox.js';
import { streamContainerStats } from './stream-container-stats.js';
import { streamContainers } from './stream-containers.js';
import { streamImages } from './stream-images.js';
import { streamPodSandboxMetrics } from './stream-pod-sandbox-metrics.js';
import { streamPodSandboxStats } from './stream-pod-sandbox-stats.js';
import { streamPodSandboxes } from './stream-pod-sandboxes.js';
import { updateContainerResources } from './update-container-resources.js';
import { updatePodSandboxResources } from './update-pod-sandbox-resources.js';
import { updateRuntimeConfig } from './update-runtime-config.js';
import { version } from './version.js';

/** The services behind the RPCs. */
export interface CriServices {
  info: RuntimeInfo;
  pods: PodLifecycle;
  sandboxes: SandboxService;
  containers: ContainerService;
  images: ImageStores;
  streaming: StreamingServer;
  stats: StatsReader;
  metrics: MetricsReader;
  events: LifecycleEvents;
}

/** RuntimeService: every RPC. */
export function runtimeHandlers(s: CriServices): RuntimeHandlers {
  const { info, pods, sandboxes, containers, streaming, events } = s;
  const statsDeps = { containers, sandboxes, stats: s.stats };
  const metricsDeps = { containers, sandboxes, metrics: s.metrics };
  return {
    version: (r) => version(info, r),
    status: (r) => status(info, r),
    runtimeConfig: () => runtimeConfig(info),
    updateRuntimeConfig: (r) => updateRuntimeConfig(info, r),
    runPodSandbox: (r) => runPodSandbox(pods, r),
    stopPodSandbox: (r) => stopPodSandbox(pods, r),
    removePodSandbox: (r) => removePodSandbox(pods, r),
    updatePodSandboxResources: (r) => updatePodSandboxResources(pods, r),
    podSandboxStatus: (r) => podSandboxStatus({ pods, sandboxes, containersOf: (id) => containers.ofSandbox(id) }, r),
    listPodSandbox: (r) => listPodSandbox(sandboxes, r),
    streamPodSandboxes: (r, sink) => streamPodSandboxes(sandboxes, r, sink),
    createContainer: (r, call) => createContainer(pods, r, call.requestBytes, call.signal),
    startContainer: (r) => startContainer(pods, r),
    stopContainer: (r) => stopContainer(containers, r),
    removeContainer: (r) => removeContainer(containers, r),
    containerStatus: (r) => containerStatus(containers, r),
    listContainers: (r) => listContainers(containers, sandboxes, r),
    streamContainers: (r, sink) => streamContainers(containers, sandboxes, r, sink),
    updateContainerResources: (r) => updateContainerResources(containers, r),
    reopenContainerLog: (r) => reopenContainerLog(containers, r),
    checkpointContainer: (r) => checkpointContainer(containers, r),
    execSync: (r, call) => execSync(containers, r, call.signal),
    exec: (r) => exec(streaming, r),
    attach: (r) => attach(streaming, r),
    portForward: (r) => portForward(streaming, r),
    containerStats: (r) => containerStats(statsDeps, r),
    listContainerStats: (r) => listContainerStats(statsDeps, r),
    podSandboxStats: (r) => podSandboxStats(statsDeps, r),
    listPodSandboxStats: (r) => listPodSandboxStats(statsDeps, r),
    streamContainerStats: (r, sink) => streamContainerStats(statsDeps, r, sink),
    streamPodSandboxStats: (r, sink) => streamPodSandboxStats(statsDeps, r, sink),
    listMetricDescriptors: () => listMetricDescriptors(),
    listPodSandboxMetrics: () => listPodSandboxMetrics(metricsDeps),
    streamPodSandboxMetrics: (r, sink) => streamPodSandboxMetrics(metricsDeps, r, sink),
    getContainerEvents: (r, sink) => getContainerEvents(events, r, sink),
  };
}

/** ImageService: every RPC. */
export function imageHandlers({ images }: Pick<CriServices, 'images'>): ImageHandlers {
  return {
    pullImage: (r, call) => pullImage(images, r, call.signal),
    listImages: (r) => listImages(images, r),
    streamImages: (r, sink) => streamImages(images, r, sink),
    imageStatus: (r) => imageStatus(images, r),
    removeImage: (r) => removeImage(images, r),
    imageFsInfo: () => imageFsInfo(images),
  };
}
