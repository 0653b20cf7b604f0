/**
 * NRI on Stove's lifecycle: the ContainerLifecycle the container service calls, turned into NRI events,
 * and (`host`) the NriHost the adaptation uses to list and update containers.
 *
 * The container service is built with this object as its lifecycle, so this object cannot need the
 * container service when it is built: it reads pods only, and gets the containers with `host(...)`,
 * which the daemon calls once the container service exists. The adaptation, built on that host, is
 * attached when NRI starts; until then the lifecycle calls do nothing.
 *
 * Notifications are raised synchronously in the order Stove reports them (the adaptation queues them),
 * from the last NRI view of each pod and container, so a removed one can still be described.
 */
import { ContainerState, type Container, type ContainerAdjustment, type PodSandbox } from '../gen/nri/api.js';
import type { ContainerConfig, LinuxContainerResources } from '../gen/runtime/v1/api.js';
import { messageOf, notFound } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import type { ContainerLifecycle, PodResizeExtensions } from '../container/deps.js';
import type { ContainerRecord } from '../container/model.js';
import type { SandboxRecord } from '../sandbox/model.js';
import type { Spec } from '../oci/index.js';
import type { RuntimeSupport } from '../cdi/index.js';
import type { NriAdaptation, NriHost } from './adaptation.js';
import { containerToNri, criResourcesToNri, nriResourcesToCri, ociResourcesToNri, podToNri, seccompProfileOf, specToNri, withStatus } from './convert.js';
import { applyAdjustment, type AdjustHost } from './spec-adjust.js';

/** The pods as NRI describes them (sandbox lookups). */
export interface NriSandboxes {
  find(id: string): SandboxRecord | undefined;
  list(): SandboxRecord[];
}

/** The containers a plugin lists and updates (the container service). */
export interface NriContainers {
  find(id: string): ContainerRecord | undefined;
  list(): ContainerRecord[];
  specOf(record: ContainerRecord): Promise<Spec | undefined>;
  /** UpdateContainerResources; `fromExtension`: without asking the plugins again. */
  updateResources(id: string, resources: LinuxContainerResources, opts: { fromExtension: true }): Promise<void>;
}

/**
 * The CRI resources a record keeps for a container NRI adjusted: what its spec now has (so that
 * ContainerStatus and a later UpdateContainerResources start from it). Swap follows the request unless
 * a plugin set it: the spec's swap may only mirror the memory limit.
 */
function recordedResources(requested: LinuxContainerResources | undefined, spec: Spec, adjust: ContainerAdjustment): LinuxContainerResources {
  const out = nriResourcesToCri(ociResourcesToNri(spec.linux?.resources));
  out.oomScoreAdj = BigInt(spec.process?.oomScoreAdj ?? 0);
  out.memorySwapLimitInBytes = adjust.linux?.resources?.memory?.swap?.value ?? requested?.memorySwapLimitInBytes ?? 0n;
  return out;
}

export class NriLifecycle implements ContainerLifecycle, PodResizeExtensions {
  private nri: NriAdaptation | undefined;
  private readonly pods = new Map<string, PodSandbox>();
  private readonly containers = new Map<string, Container>();

  constructor(
    private readonly sandboxes: NriSandboxes,
    private readonly adjustHost: AdjustHost,
    private readonly log: Logger,
  ) {}

  /** What the adaptation lists and updates: the pods, and `containers`' containers. */
  host(containers: NriContainers): NriHost {
    return {
      snapshot: () => this.snapshot(containers),
      updateContainer: async (update) => {
        const record = containers.find(update.containerId);
        if (!record) throw notFound(`container "${update.containerId}" not found`);
        await containers.updateResources(record.id, nriResourcesToCri(update.linux?.resources), { fromExtension: true });
      },
    };
  }

  /** NRI starts: the events from now on go to its plugins. */
  attach(nri: NriAdaptation): void {
    this.nri = nri;
  }

  async adjustSpec(c: { id: string; sandbox: SandboxRecord; config: ContainerConfig; spec: Spec; runtime?: () => Promise<RuntimeSupport> }): Promise<LinuxContainerResources | undefined> {
    if (!this.nri) return undefined;
    const pod = this.podOf(c.sandbox.id) ?? podToNri(c.sandbox);
    const container = specToNri({
      id: c.id,
      sandboxId: c.sandbox.id,
      name: c.config.metadata?.name ?? '',
      labels: c.config.labels,
      state: ContainerState.CONTAINER_UNKNOWN,
      pid: 0,
      spec: c.spec,
      cdiDevices: c.config.CDIDevices.map((d) => d.name),
      seccompProfile: seccompProfileOf(c.config),
      image: { name: c.config.image?.image ?? '', digest: '', configDigest: '' },
    });
    const adjust = await this.nri.createContainer(pod, container, await c.runtime?.());
    await applyAdjustment(c.spec, adjust, { ...this.adjustHost, runtimeHandler: c.sandbox.runtimeHandler, warn: (m) => this.log.warn(m, { container: c.id }) });
    this.containers.set(c.id, specToNri({ ...container, spec: c.spec, state: ContainerState.CONTAINER_CREATED, labels: c.config.labels, sandboxId: c.sandbox.id, cdiDevices: c.config.CDIDevices.map((d) => d.name), seccompProfile: seccompProfileOf(c.config) }));
    return adjust.linux?.resources || adjust.linux?.oomScoreAdj ? recordedResources(c.config.linux?.resources, c.spec, adjust) : undefined;
  }

  async starting(record: ContainerRecord): Promise<void> {
    const [pod, container] = this.describe(record);
    if (pod) await this.nri?.startContainer(pod, container).catch((err: unknown) => this.warn('StartContainer', err));
  }

  async updating(record: ContainerRecord, resources: LinuxContainerResources): Promise<LinuxContainerResources> {
    const [pod, container] = this.describe(record);
    if (!this.nri || !pod) return resources;
    return nriResourcesToCri(await this.nri.updateContainer(pod, container, criResourcesToNri(resources)));
  }

  containerEvent(event: 'created' | 'started' | 'updated' | 'stopped' | 'removed', record: ContainerRecord): void {
    const nri = this.nri;
    if (!nri) return;
    const [pod, container] = this.describe(record);
    if (!pod) return;
    const done = (p: Promise<void>) => void p.catch((err: unknown) => this.warn(event, err));
    if (event === 'created') done(nri.postCreateContainer(pod, container));
    else if (event === 'started') done(nri.postStartContainer(pod, container));
    else if (event === 'updated') done(nri.postUpdateContainer(pod, container));
    else if (event === 'stopped') done(nri.stopContainer(pod, container));
    else {
      this.containers.delete(record.id);
      done(nri.removeContainer(pod, container));
    }
  }

  podEvent(event: 'started' | 'stopped' | 'removed', sandboxId: string): void {
    const nri = this.nri;
    if (!nri) return;
    const record = this.sandboxes.find(sandboxId);
    const pod = record ? podToNri(record) : this.pods.get(sandboxId);
    if (!pod) return;
    const done = (p: Promise<void>) => void p.catch((err: unknown) => this.warn(`pod ${event}`, err));
    if (event === 'started') {
      this.pods.set(sandboxId, pod);
      done(nri.runPodSandbox(pod));
    } else if (event === 'stopped') {
      this.pods.set(sandboxId, pod);
      done(nri.stopPodSandbox(pod));
    } else {
      this.pods.delete(sandboxId);
      done(nri.removePodSandbox(pod));
    }
  }

  /** UpdatePodSandbox: plugins see the pod's new resources before they are applied; an error fails the resize. */
  async updatingPod(record: SandboxRecord, overhead: LinuxContainerResources | undefined, resources: LinuxContainerResources | undefined): Promise<void> {
    if (!this.nri) return;
    await this.nri.updatePodSandbox(podToNri(record), overhead ? criResourcesToNri(overhead) : undefined, resources ? criResourcesToNri(resources) : undefined);
  }

  /** PostUpdatePodSandbox, with the pod as it now is. */
  podUpdated(record: SandboxRecord): void {
    const nri = this.nri;
    if (!nri) return;
    const pod = podToNri(record);
    this.pods.set(record.id, pod);
    void nri.postUpdatePodSandbox(pod).catch((err: unknown) => this.warn('pod updated', err));
  }

  /** Every pod and container as NRI sees them now; a container's spec is read the first time only. */
  private async snapshot(view: NriContainers): Promise<{ pods: PodSandbox[]; containers: Container[] }> {
    const pods = this.sandboxes.list().map(podToNri);
    const containers = await Promise.all(
      view.list().map(async (r) => {
        const known = this.containers.get(r.id);
        const c = known ? this.withRecord(known, r) : containerToNri(r, await view.specOf(r));
        this.containers.set(r.id, c);
        return c;
      }),
    );
    return { pods, containers };
  }

  // ---------------------------------------------------------------------------------------------

  private podOf(id: string): PodSandbox | undefined {
    const record = this.sandboxes.find(id);
    return record ? podToNri(record) : this.pods.get(id);
  }

  /** The pod and the container as NRI sees them now (from the last spec seen and the record). */
  private describe(record: ContainerRecord): [PodSandbox | undefined, Container] {
    let container = this.containers.get(record.id);
    container = container ? this.withRecord(container, record) : containerToNri(record, undefined);
    this.containers.set(record.id, container);
    return [this.podOf(record.sandboxId), container];
  }

  private withRecord(c: Container, r: ContainerRecord): Container {
    return withStatus(c, r);
  }

  private warn(event: string, err: unknown): void {
    this.log.warn('NRI event failed', { event, error: messageOf(err) });
  }
}
