/**
 * Image stores per runtime handler (KEP-4216, the kubelet's RuntimeClassInImageCriApi): the CRI image
 * RPCs name a runtime handler in their ImageSpec, and a handler configured with an `image_store` of its
 * own pulls, lists, inspects and removes images there, and its pods' containers run from there. Every
 * other handler, and '' (the default), uses the shared store, `<root>/images`, as before.
 *
 * Each store is an ImageService of its own (blobs, layers, records, holds): an image pulled for one
 * handler is not in another's, and removing it from one leaves the other's copy. A container's root
 * filesystem and image volumes are held in the store of its pod's handler; the calls that name only a
 * container go to the store that holds it.
 */
import { invalidArgument } from '../common/errors.js';
import type { IdShift } from '../storage/idshift.js';
import type { RegistryConfig } from '../config/schema.js';
import type { DiskUsage } from '../storage/rootfs.js';
import type { FsUsage, ImageInfo, ImageService, ManifestFacts, RootfsIds } from './image-service.js';

/** A store and the handler its images are reported under (`''`: the shared store). */
export interface HandlerStore {
  runtimeHandler: string;
  service: ImageService;
}

export interface ImageStoresOptions {
  shared: ImageService;
  /** The stores of the handlers that have their own, by handler name. */
  own: ReadonlyMap<string, ImageService>;
  /** Every configured handler name (the default `runc` included). */
  handlers: readonly string[];
}

export class ImageStores {
  private readonly shared: ImageService;
  private readonly own: ReadonlyMap<string, ImageService>;
  private readonly handlers: ReadonlySet<string>;

  constructor(options: ImageStoresOptions) {
    this.shared = options.shared;
    this.own = options.own;
    this.handlers = new Set(options.handlers);
  }

  /**
   * The store of a runtime handler ('' = the default). An unknown handler is INVALID_ARGUMENT naming
   * the configured ones, as containerd answers a pull for a runtime it does not have.
   */
  forHandler(runtimeHandler: string): HandlerStore {
    if (!runtimeHandler) return { runtimeHandler: '', service: this.shared };
    const own = this.own.get(runtimeHandler);
    if (own) return { runtimeHandler, service: own };
    if (this.handlers.has(runtimeHandler)) return { runtimeHandler: '', service: this.shared };
    throw invalidArgument(
      `runtime handler "${runtimeHandler}" is not configured (runtime handlers: ${[...this.handlers].map((n) => JSON.stringify(n)).join(', ')})`,
    );
  }

  /** True when the handler has an image store of its own. */
  hasOwnStore(runtimeHandler: string): boolean {
    return this.own.has(runtimeHandler);
  }

  /** Every store, the shared one first, each with the handler its images are reported under. */
  stores(): HandlerStore[] {
    return [{ runtimeHandler: '', service: this.shared }, ...[...this.own].map(([runtimeHandler, service]) => ({ runtimeHandler, service }))];
  }

  private services(): ImageService[] {
    return [this.shared, ...this.own.values()];
  }

  /** The store that holds a container's root filesystem or image volumes; the shared one if none does. */
  private ofContainer(containerId: string): ImageService {
    if (this.own.size === 0) return this.shared;
    return this.services().find((s) => s.holdsFor(containerId)) ?? this.shared;
  }

  // ---------------------------------------------------------------------------------------------
  // Every store at once (the configuration, counting, the daemon's stop)

  /** Images in every store (an image in two stores counts twice). */
  count(): number {
    return this.services().reduce((n, s) => n + s.list().length, 0);
  }

  setPinned(patterns: readonly string[]): void {
    for (const s of this.services()) s.setPinned(patterns);
  }

  setTrust(trust: { certsDirs: readonly string[]; signaturePolicy: string; signaturePolicyDir: string }): void {
    for (const s of this.services()) s.setTrust(trust);
  }

  setRegistries(registries: Record<string, RegistryConfig>): void {
    for (const s of this.services()) s.setRegistries(registries);
  }

  async close(): Promise<void> {
    for (const s of this.services()) await s.close();
  }

  /**
   * Space per filesystem: the image stores (the shared one first), and the containers' writable layers,
   * which are one tree whatever store their image came from.
   */
  async fsInfo(): Promise<{ images: FsUsage[]; containers: FsUsage }> {
    const all = await Promise.all(this.services().map((s) => s.fsInfo()));
    const containers = { ...all[0]!.containers };
    for (const other of all.slice(1)) {
      containers.bytes += other.containers.bytes;
      containers.inodes += other.containers.inodes;
    }
    return { images: all.map((u) => u.images), containers };
  }

  // ---------------------------------------------------------------------------------------------
  // Containers (container/deps.ts's ContainerImages)

  getImage(spec: string, runtimeHandler: string): ImageInfo {
    return this.forHandler(runtimeHandler).service.getImage(spec);
  }

  manifestFacts(imageId: string, runtimeHandler: string): Promise<ManifestFacts> {
    return this.forHandler(runtimeHandler).service.manifestFacts(imageId);
  }

  mountRootfs(spec: string, containerId: string, target: string, options: { idShift?: IdShift; idmap?: boolean; runtimeHandler: string }): Promise<RootfsIds> {
    const { runtimeHandler, ...rest } = options;
    return this.forHandler(runtimeHandler).service.mountRootfs(spec, containerId, target, rest);
  }

  mountImageVolume(spec: string, containerId: string, index: number, target: string, runtimeHandler: string): Promise<ImageInfo> {
    return this.forHandler(runtimeHandler).service.mountImageVolume(spec, containerId, index, target);
  }

  holdImage(spec: string, containerId: string, runtimeHandler: string): Promise<ImageInfo> {
    return this.forHandler(runtimeHandler).service.holdImage(spec, containerId);
  }

  heldImage(containerId: string): string | undefined {
    return this.ofContainer(containerId).heldImage(containerId);
  }

  holders(): string[] {
    return this.services().flatMap((s) => s.holders());
  }

  removeRootfs(containerId: string): Promise<void> {
    return this.ofContainer(containerId).removeRootfs(containerId);
  }

  declaredVolumesDir(containerId: string): string {
    return this.ofContainer(containerId).declaredVolumesDir(containerId);
  }

  rootfsUsage(containerId: string): Promise<DiskUsage> {
    return this.ofContainer(containerId).rootfsUsage(containerId);
  }

  writableLayerFs(containerId: string): string {
    return this.ofContainer(containerId).writableLayerFs(containerId);
  }

  /** The overlay upper dir of a container's root filesystem, in the store that holds it. */
  upperDirOf(containerId: string): string {
    return this.ofContainer(containerId).upperDirOf(containerId);
  }

  /**
   * A tar archive that is not an image layer (a checkpoint archive) unpacked into `dir` with the layer
   * unpacker's checks and limits: the shared store's, since it lands in no store.
   */
  unpackArchive(...args: Parameters<ImageService['unpackArchive']>): Promise<void> {
    return this.shared.unpackArchive(...args);
  }
}
