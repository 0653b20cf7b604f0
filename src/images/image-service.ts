/**
 * Stove's images: pull, list, resolve and remove images, and the root filesystems containers run on.
 *
 * On disk (under the images dir):
 *   blobs/sha256/<hex>      content store (layers, configs, manifests), shared by every image
 *   layers/<chain hex>/     unpacked layers, one per chain ID, shared; l/<short> links to them
 *   records/<id hex>.json   one per image, written last (a partly pulled image is never listed)
 *   holds/<container>.json  which image each container's root filesystem is built on
 *   holds/<container>.iv<n>.json  the image of a container's image volume n (mounted read-only)
 * A container's overlay upper/work dirs live in its own dir, `<container dir>/fs/{upper,work}`, or with
 * `writableLayersDir` (a split image filesystem) in `<writable layers dir>/<container id>/{upper,work}`;
 * the hold records which, so a container keeps its writable layer when the setting changes.
 */
import { dirname, isAbsolute, join, normalize, relative } from 'node:path';
import { chmod, chown, mkdir, readdir, rm, unlink, stat } from 'node:fs/promises';
import { KeyedMutex } from '../common/locks.js';
import { StoveError, failedPrecondition, internal, invalidArgument, notFound, messageOf, wrap } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import { shortId } from '../common/ids.js';
import { readJsonFile, writeJsonAtomic } from '../persist/atomic-file.js';
import { BlobStore } from '../storage/blobs.js';
import { LayerStore } from '../storage/layers.js';
import { LayerJobError, UnpackPool } from '../storage/unpack-pool.js';
import type { EntryPolicy } from '../storage/extract.js';
import { diskUsage, mountIdmappedOverlay, mountOverlay, mountReadOnlyOverlay, unmountOverlay, type DiskUsage } from '../storage/rootfs.js';
import { shiftOwnership, type IdShift } from '../storage/idshift.js';
import { ImageStore, type ImageRecord, type LayerRef } from './image-store.js';
import type { Quarantine } from '../persist/quarantine.js';
import { gcProtection, type GcProtection } from './gc-protection.js';
import { RegistryClient } from './registry-client.js';
import type { RegistryConfig } from '../config/schema.js';
import { PinnedImages } from './pinned.js';
import { Leases, Puller } from './pull.js';
import { credentialsFromAuthConfig, type AuthConfigLike } from './auth.js';
import { digestReference, formatReference, parseReference, repositoryName, tagReference } from './reference.js';
import { progressFile } from './progress.js';
import { CertsDirs } from './trust/certs.js';
import { PolicyStore } from './trust/enforce.js';
import type { Platform } from './manifest.js';
import type { Telemetry } from '../observability/hooks.js';
import type { ImageConfig } from '../oci/index.js';

export interface ImageServiceOptions {
  imagesDir: string;
  /** Volatile state dir (pull progress snapshots go to `<state>/pulls/`). */
  stateDir: string;
  /** A container's own persistent dir (its overlay upper/work dirs go in `fs/` there unless `writableLayersDir`). */
  containerDir: (containerId: string) => string;
  /** `images.writable_layers_dir`: the writable layers' own tree, on a filesystem apart from the images (empty: none). */
  writableLayersDir?: string;
  maxConcurrentDownloads: number;
  stallTimeoutSeconds: number;
  /** `images.max_layer_size`, `images.max_image_size`, `images.min_free_space` (bytes; absent: no cap). */
  maxLayerSize?: number;
  maxImageSize?: number;
  minFreeSpace?: number;
  registries: Record<string, RegistryConfig>;
  /** Certs dirs in Docker's layout, first match wins (none: only the built-in CAs). */
  certsDirs?: string[];
  /** containers-policy.json(5) every pull must satisfy (empty or absent: accept every image). */
  signaturePolicy?: string;
  /** Per-namespace policies `<dir>/<namespace>.json`, used instead when they exist. */
  signaturePolicyDir?: string;
  /** `images.pinned`: images reported as pinned (never garbage-collected by the kubelet). */
  pinnedImages?: readonly string[];
  /** Where unreadable image, layer and hold records go. */
  quarantine?: Quarantine;
  /** fdatasync each blob before committing it (default true). */
  syncBlobs?: boolean;
  /** Metrics and trace spans (daemon.ts: the one of observability/start.ts). */
  telemetry: Telemetry;
  log: Logger;
}

/** What the container module needs from an image. */
export interface ImageInfo {
  id: string;
  repoTags: string[];
  repoDigests: string[];
  /** The OCI image config's `config` section (Entrypoint, Cmd, Env, WorkingDir, User, StopSignal, …). */
  config: ImageConfig;
  platform: Partial<Platform>;
  /** Absolute paths of the unpacked layers, bottom first. */
  layerDirs: string[];
}

/** What an image's platform manifest says beyond its config: its annotations and layer blobs. */
export interface ManifestFacts {
  annotations: Readonly<Record<string, string>>;
  /** The layers' blobs in the content store, bottom first (compressed as pulled). */
  layerBlobs: string[];
}

interface Hold {
  containerId: string;
  imageId: string;
  /** Where the overlay is mounted, while it is. */
  target?: string;
  /** The owners were shifted into a user namespace's range (the overlay is mounted `metacopy=on`). */
  idShifted?: boolean;
  /** The overlay's lower dirs were idmapped into a user namespace's range (nothing chowned). */
  idmapped?: boolean;
  /** The dir of the container's upper and work dirs (absent in holds of an older Stove: `<container dir>/fs`). */
  fsDir?: string;
}

/**
 * How a container's root filesystem shows its owners: as in the image (`host`), or, in a pod with its
 * own user namespace, through idmapped layers (`idmapped`) or chowned on the overlay (`shifted`).
 */
export type RootfsIds = 'host' | 'idmapped' | 'shifted';

export interface FsUsage {
  mountpoint: string;
  bytes: bigint;
  inodes: bigint;
}

/**
 * The stores and clients an ImageService works with. daemon.ts builds them with imageParts() and hands
 * them in; a test may put a fake in any place (a registry client that answers what the test wants).
 */
export interface ImageParts {
  blobs: BlobStore;
  layers: LayerStore;
  store: ImageStore;
  certs: CertsDirs;
  policies: PolicyStore;
  client: RegistryClient;
  pool: UnpackPool;
}

/** The real parts for `options`' dirs, registries, certs, policies and download limits. */
export function imageParts(options: ImageServiceOptions): ImageParts {
  const certs = new CertsDirs(options.certsDirs ?? []);
  return {
    blobs: new BlobStore(options.imagesDir),
    layers: new LayerStore(options.imagesDir),
    store: new ImageStore(options.imagesDir),
    certs,
    policies: new PolicyStore({
      policyFile: options.signaturePolicy ?? '',
      policyDir: options.signaturePolicyDir ?? '',
      log: options.log.child({ module: 'signature-policy' }),
    }),
    client: new RegistryClient({
      registries: options.registries,
      stallTimeoutMs: options.stallTimeoutSeconds * 1000,
      log: options.log.child({ module: 'registry' }),
      certs,
    }),
    pool: new UnpackPool({ size: Math.max(1, options.maxConcurrentDownloads) }),
  };
}

export class ImageService {
  private readonly blobs: BlobStore;
  private readonly layers: LayerStore;
  private readonly store: ImageStore;
  private readonly client: RegistryClient;
  private readonly certs: CertsDirs;
  private readonly policies: PolicyStore;
  private readonly pool: UnpackPool;
  private readonly puller: Puller;
  private readonly leases = new Leases();
  private readonly locks = new KeyedMutex();
  private readonly holds = new Map<string, Hold>();
  /** manifestFacts by image ID (content-addressed: never stale). */
  private readonly manifestFactsCache = new Map<string, ManifestFacts>();
  private readonly holdsDir: string;
  private readonly log: Logger;
  private pinned: PinnedImages;
  /** What records Stove could not read may reference (gc-protection.ts); none until `open` reads them. */
  private protection: GcProtection = { hexes: new Set(), heldImages: new Set(), blockers: [] };

  private constructor(
    private readonly options: ImageServiceOptions,
    parts: ImageParts,
  ) {
    this.log = options.log;
    ({ blobs: this.blobs, layers: this.layers, store: this.store, certs: this.certs, policies: this.policies, client: this.client, pool: this.pool } = parts);
    this.holdsDir = join(options.imagesDir, 'holds');
    this.pinned = new PinnedImages(options.pinnedImages ?? []);
    this.puller = new Puller({
      blobs: this.blobs,
      layers: this.layers,
      store: this.store,
      client: this.client,
      pool: this.pool,
      leases: this.leases,
      locks: this.locks,
      telemetry: options.telemetry,
      log: options.log,
      maxConcurrentDownloads: options.maxConcurrentDownloads,
      syncBlobs: options.syncBlobs ?? true,
      progressFile: (ref) => progressFile(options.stateDir, ref),
      policies: this.policies,
      isPinned: (r) => this.pinned.matches(r),
      maxLayerSize: options.maxLayerSize,
      maxImageSize: options.maxImageSize,
      minFreeSpace: options.minFreeSpace,
      discard: (chainIds, blobs) => this.collectGarbage({ layers: chainIds.map((chainId) => ({ chainId })), blobs }),
    });
  }

  /** Opens the store: loads images, layers and holds, and removes leftovers of interrupted work. */
  static async open(options: ImageServiceOptions, parts: ImageParts): Promise<ImageService> {
    const service = new ImageService(options, parts);
    await mkdir(options.imagesDir, { recursive: true, mode: 0o700 });
    // A runtime handler's own store may be a dir the operator made: images are root's alone.
    if (((await stat(options.imagesDir)).mode & 0o777) !== 0o700) await chmod(options.imagesDir, 0o700);
    if (options.writableLayersDir) await service.openWritableLayersDir(options.writableLayersDir);
    await service.blobs.init();
    const quarantine = options.quarantine;
    await service.layers.init(quarantine);
    for (const name of service.layers.unrecorded) service.log.warn('layer dir without layer.json left alone', { layer: name });
    await service.store.init(quarantine);
    await mkdir(service.holdsDir, { recursive: true, mode: 0o700 });
    for (const name of await readdir(service.holdsDir)) {
      if (!name.endsWith('.json')) continue;
      const path = join(service.holdsDir, name);
      try {
        const hold = await readJsonFile<Hold>(path);
        if (!hold || typeof hold.containerId !== 'string' || typeof hold.imageId !== 'string') throw new Error('not a hold');
        if (hold.fsDir !== undefined && (typeof hold.fsDir !== 'string' || !isAbsolute(hold.fsDir) || normalize(hold.fsDir) !== hold.fsDir))
          throw new Error('its writable layer dir is not an absolute path');
        // A root filesystem's hold from before the holds named the dir: the layer is beside the record.
        if (hold.fsDir === undefined && containerOfHolder(hold.containerId) === hold.containerId) hold.fsDir = service.besideRecord(hold.containerId);
        service.holds.set(hold.containerId, hold);
      } catch (err) {
        await quarantine?.move('hold', name.slice(0, -'.json'.length), path, err);
      }
    }
    service.protection = await gcProtection({
      quarantined: service.quarantinedImageRecords(),
      unrecordedImages: [...new Set([...service.holds.values()].map((h) => h.imageId).filter((id) => !service.store.get(id)))],
      blobPath: (digest) => service.blobs.path(digest),
      layer: (chainId) => service.layers.get(chainId),
    });
    // A layer dir without its layer.json names no parent: the layers below it cannot be told.
    if (service.layers.unrecorded.length) service.protection.blockers.push(`layer dir(s) without layer.json: ${service.layers.unrecorded.join(', ')}`);
    await service.collectGarbage(undefined);
    return service;
  }

  /**
   * The writable layers' tree: root's alone (a root container's writable layer may hold a set-user-ID
   * program), whatever mode the mount point was given.
   */
  private async openWritableLayersDir(dir: string): Promise<void> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const st = await stat(dir);
    if (!st.isDirectory()) throw invalidArgument(`images.writable_layers_dir ${dir} is not a directory`);
    if ((st.mode & 0o7777) !== 0o700 || st.uid !== 0) {
      await chown(dir, 0, 0);
      await chmod(dir, 0o700);
      this.log.info('closed the writable layers dir to unprivileged users', { dir, mode: (st.mode & 0o7777).toString(8) });
    }
  }

  async close(): Promise<void> {
    await this.pool.close();
    await this.client.close();
  }

  // ---------------------------------------------------------------------------------------------
  // Images

  /**
   * Pulls an image (or finds it present) and returns its record. `namespace` is the pod's, when the
   * pull carries a sandbox config: it selects a per-namespace signature policy. `signal`: the caller
   * left (Puller.pull says what stops).
   */
  async pull(image: string, auth?: AuthConfigLike, namespace?: string, signal?: AbortSignal): Promise<ImageRecord> {
    const ref = parseReference(image);
    const started = performance.now();
    try {
      const record = await this.puller.pull(ref, credentialsFromAuthConfig(auth), namespace, signal);
      this.options.telemetry.metrics.imagePull('success', (performance.now() - started) / 1000);
      return record;
    } catch (err) {
      this.options.telemetry.metrics.imagePull('failure', (performance.now() - started) / 1000);
      throw wrap(err, `failed to pull image "${formatReference(ref)}"`);
    }
  }

  /** True when the image matches `images.pinned` as configured now. */
  isPinned(record: ImageRecord): boolean {
    return this.pinned.matches(record);
  }

  /** Replaces the pinned patterns (a config reload); applies to the next report of every image. */
  setPinned(patterns: readonly string[]): void {
    this.pinned = new PinnedImages(patterns);
  }

  /** Replaces the certs dirs and signature policy files (a config reload) for pulls that start later. */
  setTrust(trust: { certsDirs: readonly string[]; signaturePolicy: string; signaturePolicyDir: string }): void {
    this.certs.setDirs(trust.certsDirs);
    this.policies.setFiles(trust.signaturePolicy, trust.signaturePolicyDir);
  }

  /** Replaces the per-registry settings (mirrors, auth, insecure) for pulls that start later. */
  setRegistries(registries: Record<string, RegistryConfig>): void {
    this.client.setRegistries(registries);
  }

  list(): ImageRecord[] {
    return this.store.all();
  }

  /** Finds an image by ID (full, bare hex or unique prefix), repo tag or repo digest. */
  find(spec: string): ImageRecord | undefined {
    const s = spec.trim();
    if (!s) return undefined;
    const hex = s.startsWith('sha256:') ? s.slice(7) : s;
    if (/^[a-f0-9]{64}$/.test(hex)) {
      const byId = this.store.get(`sha256:${hex}`);
      if (byId) return byId;
    }
    try {
      const ref = parseReference(s);
      if (ref.digest) {
        const byDigest = this.store.byRepoDigest(digestReference(ref, ref.digest));
        if (byDigest) return byDigest;
        const repo = repositoryName(ref);
        const byManifest = this.store.all().find((r) => r.manifestDigest === ref.digest && r.repoDigests.some((d) => d.startsWith(repo + '@')));
        if (byManifest) return byManifest;
      } else {
        const byTag = this.store.byRepoTag(tagReference(ref)!);
        if (byTag) return byTag;
      }
    } catch {
      // not a reference: maybe an ID prefix
    }
    if (/^[a-f0-9]{4,63}$/.test(hex)) {
      const ids = this.store.idsWithPrefix(hex);
      if (ids.length === 1) return this.store.get(ids[0]!);
    }
    return undefined;
  }

  /** The image a container is created from, with its config and layer dirs; NOT_FOUND if absent. */
  getImage(spec: string): ImageInfo {
    const record = this.find(spec);
    if (!record) throw notFound(`image "${spec}" not found`);
    return {
      id: record.id,
      repoTags: record.repoTags,
      repoDigests: record.repoDigests,
      config: record.config.config ?? {},
      platform: { os: record.config.os, architecture: record.config.architecture, variant: record.config.variant },
      layerDirs: record.layers.map((l) => this.layers.diffDir(l.chainId)),
    };
  }

  /**
   * The annotations and layer blobs of the platform manifest of image `imageId` (getImage's `id`),
   * read from the content store once per image. NOT_FOUND when the image is gone.
   */
  async manifestFacts(imageId: string): Promise<ManifestFacts> {
    const cached = this.manifestFactsCache.get(imageId);
    if (cached) return cached;
    const record = this.store.get(imageId);
    if (!record) throw notFound(`image "${imageId}" not found`);
    // Parsed and checked when it was pulled; only its annotations are read again.
    const manifest = (await readJsonFile(this.blobs.path(record.manifestDigest))) as { annotations?: unknown } | undefined;
    const annotations: Record<string, string> = {};
    const raw = manifest?.annotations;
    if (raw && typeof raw === 'object') {
      for (const [k, v] of Object.entries(raw)) if (typeof v === 'string') annotations[k] = v;
    }
    const facts = { annotations, layerBlobs: record.layers.map((l) => this.blobs.path(l.digest)) };
    this.manifestFactsCache.set(imageId, facts);
    return facts;
  }

  /**
   * Removes an image with every tag and digest it has (as containerd does). An unknown image is not
   * an error. An image a container still uses is refused. Blobs and layers no other image uses are
   * deleted.
   */
  async remove(spec: string): Promise<void> {
    const record = this.find(spec);
    if (!record) return;
    const users = [...this.holds.values()].filter((h) => h.imageId === record.id).map((h) => shortId(h.containerId));
    if (users.length > 0)
      throw failedPrecondition(`image "${spec}" (${shortId(record.id.slice(7))}) is in use by container${users.length > 1 ? 's' : ''} ${users.join(', ')}`);
    if (this.protection.heldImages.has(record.id))
      throw failedPrecondition(
        `image "${spec}" (${shortId(record.id.slice(7))}) may be in use by a container: a hold record that names it is in quarantine (${this.options.quarantine?.dir ?? 'quarantine'}); repair or delete the entry and restart stove`,
      );
    await this.store.remove(record.id);
    this.manifestFactsCache.delete(record.id);
    this.log.info('image removed', { image: spec, imageId: record.id, repoTags: record.repoTags });
    await this.collectGarbage(record);
  }

  /**
   * Deletes layers and blobs no image references, no pull in progress relies on and no unreadable
   * record may reference (gc-protection.ts): those of `removed`, or (at start-up) everything
   * unreferenced, a sweep that waits while any record is in doubt.
   */
  private async collectGarbage(removed: (Pick<ImageRecord, 'blobs'> & { layers: Pick<LayerRef, 'chainId'>[] }) | undefined): Promise<void> {
    if (this.protection.blockers.length) {
      this.log.warn(`image garbage collection skipped: ${this.protection.blockers.join('; ')}`);
      return;
    }
    const doubt = removed ? undefined : this.recordsInDoubt();
    if (doubt) {
      this.log.warn(`start-up sweep of unreferenced image content skipped (what RemoveImage frees is still freed): ${doubt}`);
      return;
    }
    const referencedBlobs = new Set<string>();
    const referencedLayers = new Set<string>();
    for (const r of this.store.all()) {
      for (const b of r.blobs) referencedBlobs.add(b);
      for (const l of r.layers) referencedLayers.add(l.chainId);
    }
    const layerCandidates = removed ? removed.layers.map((l) => l.chainId) : this.layers.all().map((l) => l.chainId);
    const blobCandidates = removed ? removed.blobs : await this.blobs.list();
    const isReferenced = (key: string, set: Set<string>) => {
      if (set.has(key) || this.leases.has(key) || this.protection.hexes.has(key.slice(key.indexOf(':') + 1))) return true;
      // Re-check live: an image may have been recorded since the sets were built.
      return this.store.all().some((r) => r.blobs.includes(key) || r.layers.some((l) => l.chainId === key));
    };
    let freedLayers = 0;
    let freedBlobs = 0;
    for (const chainId of layerCandidates) {
      await this.locks.run(chainId, async () => {
        if (isReferenced(chainId, referencedLayers) || !this.layers.has(chainId)) return;
        await this.layers.remove(chainId);
        freedLayers++;
      });
    }
    for (const digest of blobCandidates) {
      await this.locks.run(digest, async () => {
        if (isReferenced(digest, referencedBlobs)) return;
        await this.blobs.remove(digest);
        freedBlobs++;
      });
    }
    if (freedLayers || freedBlobs) this.log.info('freed unused image content', { layers: freedLayers, blobs: freedBlobs });
  }

  /** Image, layer and hold records in quarantine. */
  private quarantinedImageRecords() {
    return (this.options.quarantine?.list() ?? []).filter((e) => e.kind === 'image' || e.kind === 'layer' || e.kind === 'hold');
  }

  /**
   * Why content no readable record explains may still be in use: a record in quarantine, a hold
   * naming an image without a record.
   */
  private recordsInDoubt(): string | undefined {
    const quarantined = this.quarantinedImageRecords();
    if (quarantined.length) return `${quarantined.length} image, layer or hold record(s) in quarantine (${quarantined.map((e) => `${e.kind} ${e.id}`).join(', ')})`;
    const unknown = [...this.holds.values()].filter((h) => !this.store.get(h.imageId));
    if (unknown.length) return `container(s) ${unknown.map((h) => shortId(h.containerId)).join(', ')} hold image(s) without a record`;
    return undefined;
  }

  /** Space used by images (layers and blobs) and by containers' writable layers. */
  async fsInfo(): Promise<{ images: FsUsage; containers: FsUsage }> {
    let bytes = 0n;
    let inodes = 0n;
    for (const layer of this.layers.all()) {
      bytes += BigInt(layer.usage.bytes);
      inodes += BigInt(layer.usage.inodes);
    }
    for (const digest of await this.blobs.list()) {
      const size = await this.blobs.size(digest).catch(() => 0);
      bytes += BigInt(Math.ceil(size / 4096) * 4096);
      inodes += 1n;
    }
    let cBytes = 0n;
    let cInodes = 0n;
    for (const hold of this.holds.values()) {
      const usage = await this.rootfsUsage(hold.containerId);
      cBytes += usage.bytes;
      cInodes += usage.inodes;
    }
    return {
      images: { mountpoint: this.options.imagesDir, bytes, inodes },
      containers: { mountpoint: this.options.writableLayersDir || dirname(this.options.containerDir('x')), bytes: cBytes, inodes: cInodes },
    };
  }

  /**
   * The dir that names the filesystem of a container's writable layer (ContainerStats' `fs_id`): the
   * writable layers dir, or `<root>/containers` for one kept beside its record.
   */
  writableLayerFs(containerId: string): string {
    const fs = this.fsDir(containerId);
    return fs === this.besideRecord(containerId) ? dirname(this.options.containerDir(containerId)) : dirname(fs);
  }

  // ---------------------------------------------------------------------------------------------
  // Container root filesystems

  /** Where a container's upper and work dirs are: as its hold recorded, else where new ones go. */
  private fsDir(containerId: string): string {
    const recorded = this.holds.get(containerId)?.fsDir;
    if (recorded) return recorded;
    return this.options.writableLayersDir ? join(this.options.writableLayersDir, containerId) : this.besideRecord(containerId);
  }

  private besideRecord(containerId: string): string {
    return join(this.options.containerDir(containerId), 'fs');
  }

  /**
   * Writes a hold without fsync: a killed daemon's writes stay in the page cache, so only a power loss
   * (or kernel crash) can lose one, and then recovery derives what it protected. Mounts are gone after
   * such a crash, so `target` no longer matters; a created container's record (written durably after its
   * root filesystem) names its image and recovery holds it again (`holdImage`); a create that had no
   * record yet is removed at start-up by its container dir, holds or not.
   */
  private async saveHold(hold: Hold): Promise<void> {
    await writeJsonAtomic(join(this.holdsDir, `${hold.containerId}.json`), hold, { durable: false });
    this.holds.set(hold.containerId, hold);
  }

  /** Marks an image as used by a container: RemoveImage refuses it until `releaseImage`. */
  async holdImage(imageSpec: string, containerId: string): Promise<ImageInfo> {
    const image = this.checkHold(imageSpec, containerId);
    if (!this.holds.has(containerId)) await this.saveHold({ containerId, imageId: image.id });
    return image;
  }

  /** The image a container may hold: it exists, and the container holds no other. */
  private checkHold(imageSpec: string, containerId: string): ImageInfo {
    if (!/^[A-Za-z0-9_.-]+$/.test(containerId)) throw invalidArgument(`invalid container ID "${containerId}"`);
    const image = this.getImage(imageSpec);
    const existing = this.holds.get(containerId);
    if (existing && existing.imageId !== image.id)
      throw failedPrecondition(`container ${shortId(containerId)} already holds image ${existing.imageId}`);
    return image;
  }

  /** Forgets a container's use of its image (its root filesystem must be removed already). */
  async releaseImage(containerId: string): Promise<void> {
    if (!this.holds.has(containerId)) return;
    await unlink(join(this.holdsDir, `${containerId}.json`)).catch(() => {});
    this.holds.delete(containerId);
  }

  /** The image a container holds, if any. */
  heldImage(containerId: string): string | undefined {
    return this.holds.get(containerId)?.imageId;
  }

  /** True when this store holds a container's root filesystem image or one of its image volumes. */
  holdsFor(containerId: string): boolean {
    return this.holds.has(containerId) || this.imageVolumeHolds(containerId).length > 0;
  }

  /** Every container that holds an image (to find leftovers of interrupted creates at start-up). */
  holders(): string[] {
    return [...this.holds.keys()];
  }

  /**
   * Mounts a container's root filesystem at `target`: overlay of the image's layers with the
   * container's own upper/work dirs (created on first use, kept across mounts). Holds the image.
   * With `idShift` (a pod with its own user namespace), the files must look owned by the host ids the
   * namespace maps their owners to: with `idmap` (the OCI runtime has idmapped mounts, so the node's
   * kernel is asked for them too) the layers are idmapped under the overlay (rootfs.ts), nothing
   * chowned; without it, or where the kernel or filesystem cannot idmap them, every file's owner is moved
   * on the overlay (idshift.ts). The layers themselves stay untouched. Resolves with how it was done.
   */
  async mountRootfs(imageSpec: string, containerId: string, target: string, options: { idShift?: IdShift; idmap?: boolean } = {}): Promise<RootfsIds> {
    const image = this.checkHold(imageSpec, containerId);
    const record = this.store.get(image.id)!;
    const lower = record.layers.length ? this.layers.lowerDirs(record.layers.map((l) => l.chainId)) : [this.layers.emptyDir];
    const fs = this.fsDir(containerId);
    const overlay = { baseDir: this.options.imagesDir, lowerDirs: lower, upperDir: join(fs, 'upper'), workDir: join(fs, 'work'), target };
    if (options.idShift && options.idmap && !this.holds.get(containerId)?.idShifted) {
      const hold = this.saveHold({ containerId, imageId: image.id, target, fsDir: fs, idmapped: true });
      let mounted: boolean;
      try {
        mounted = await mountIdmappedOverlay(overlay, options.idShift, hold);
      } catch (err) {
        await hold.catch(() => {});
        throw wrap(err, `failed to mount the root filesystem of container "${containerId}"`);
      }
      if (mounted) return 'idmapped';
      this.log.info('the kernel cannot idmap the image layers: the root filesystem is chowned into the user namespace instead', { container: shortId(containerId) });
    }
    const idShifted = options.idShift !== undefined || this.holds.get(containerId)?.idShifted === true;
    // One hold, written before the mount with the target it goes on: a mount that fails, or a daemon
    // killed in between, leaves a hold that unmounting and removal handle (not mounted is fine).
    const hold = this.saveHold({ containerId, imageId: image.id, target, fsDir: fs, ...(idShifted ? { idShifted } : {}) });
    try {
      await mountOverlay({ ...overlay, metacopy: idShifted }, hold);
    } catch (err) {
      await hold.catch(() => {}); // settled before the caller cleans up
      throw wrap(err, `failed to mount the root filesystem of container "${containerId}"`);
    }
    if (!options.idShift) return 'host';
    const started = performance.now();
    try {
      const result = await shiftOwnership(target, options.idShift);
      this.log.debug('root filesystem owners shifted', { container: shortId(containerId), ...result, ms: +(performance.now() - started).toFixed(1) });
    } catch (err) {
      throw wrap(err, `failed to shift the owners of the root filesystem of container "${containerId}" into its user namespace`);
    }
    return 'shifted';
  }

  /**
   * Mounts an image read-only (nosuid, nodev; programs in it may run) at `target` as image volume `index` of a
   * container: the overlay of its unpacked layers, nothing copied. Holds the image like a root
   * filesystem does, until `removeRootfs` of the container.
   */
  async mountImageVolume(imageSpec: string, containerId: string, index: number, target: string): Promise<ImageInfo> {
    const holder = imageVolumeHolder(containerId, index);
    const image = this.checkHold(imageSpec, holder);
    const record = this.store.get(image.id)!;
    const hold = this.saveHold({ containerId: holder, imageId: image.id, target });
    try {
      const lowerDirs = this.layers.lowerDirs(record.layers.map((l) => l.chainId));
      await hold;
      await mountReadOnlyOverlay({ baseDir: this.options.imagesDir, lowerDirs, padDir: relative(this.options.imagesDir, this.layers.emptyDir), target });
    } catch (err) {
      await hold.catch(() => {}); // settled before the caller cleans up
      throw wrap(err, `failed to mount image "${imageSpec}" as a volume at ${target}`);
    }
    return image;
  }

  /** The holds of a container's image volumes. */
  private imageVolumeHolds(containerId: string): Hold[] {
    const prefix = imageVolumeHolder(containerId, 0).slice(0, -1);
    return [...this.holds.values()].filter((h) => h.containerId.startsWith(prefix) && /^\d+$/.test(h.containerId.slice(prefix.length)));
  }

  /** Unmounts a container's root filesystem (its writable layer and the hold stay). */
  async unmountRootfs(containerId: string): Promise<void> {
    const hold = this.holds.get(containerId);
    if (!hold?.target) return;
    await unmountOverlay(hold.target);
    await this.saveHold({ containerId, imageId: hold.imageId, ...(hold.idShifted ? { idShifted: true } : {}), ...(hold.idmapped ? { idmapped: true } : {}), ...(hold.fsDir ? { fsDir: hold.fsDir } : {}) });
  }

  /** Unmounts, deletes the writable layer, and releases the image; the same for the image volumes. */
  async removeRootfs(containerId: string): Promise<void> {
    for (const volume of this.imageVolumeHolds(containerId)) {
      if (volume.target) await unmountOverlay(volume.target);
      await this.releaseImage(volume.containerId);
    }
    await this.unmountRootfs(containerId);
    await rm(this.fsDir(containerId), { recursive: true, force: true });
    await this.releaseImage(containerId);
  }

  /**
   * Unpacks a tar archive that is not an image layer (a checkpoint archive, its root filesystem diff)
   * into the directory `dir` with the layer unpacker's checks, `policy`'s stricter ones and the layer
   * limits (images.max_layer_size, images.min_free_space). A refused entry or a malformed archive is
   * FAILED_PRECONDITION, as a hostile layer is; a cap is RESOURCE_EXHAUSTED.
   */
  async unpackArchive(path: string, dir: string, policy: EntryPolicy): Promise<void> {
    const fail = (err: unknown): StoveError => {
      if (err instanceof LayerJobError) {
        if (err.reason === 'unsafe') return failedPrecondition(`${policy.what} ${path} was refused as unsafe: ${err.message}`);
        if (err.reason === 'format') return failedPrecondition(`${policy.what} ${path} is not a valid tar archive: ${err.message}`);
        if (err.reason === 'too-large' || err.reason === 'no-space') return new StoveError('ResourceExhausted', `${policy.what} ${path}: ${err.message}`);
      }
      return internal(`unpacking ${policy.what} ${path}: ${messageOf(err)}`, err);
    };
    const result = await this.pool
      .run({
        digestAlgorithm: 'sha256',
        sourcePath: path,
        unpackDir: dir,
        policy,
        maxTarBytes: this.options.maxLayerSize,
        minFreeBytes: this.options.minFreeSpace,
      })
      .catch((err: unknown) => {
        throw fail(err);
      });
    if (result.decodeError) throw fail(new LayerJobError(result.decodeError, 'format'));
  }

  /** The overlay upper dir (the writable layer) of a container's root filesystem. */
  upperDirOf(containerId: string): string {
    return join(this.fsDir(containerId), 'upper');
  }

  /**
   * Where a container's copies of its image's declared VOLUMEs go (`<n>` each): beside its writable
   * layer, so they are counted with it and removed with it (`removeRootfs`).
   */
  declaredVolumesDir(containerId: string): string {
    return join(this.fsDir(containerId), 'volumes');
  }

  /** Bytes and inodes of a container's writable layer and its declared volumes' copies. */
  async rootfsUsage(containerId: string): Promise<DiskUsage> {
    const fs = this.fsDir(containerId);
    const [upper, volumes] = [await this.usageOf(join(fs, 'upper'), containerId), await this.usageOf(join(fs, 'volumes'), containerId)];
    return { bytes: upper.bytes + volumes.bytes, inodes: upper.inodes + volumes.inodes };
  }

  /** A missing dir (no rootfs yet, no declared volumes, or removed) measures as nothing. */
  private async usageOf(dir: string, containerId: string): Promise<DiskUsage> {
    return diskUsage(dir).catch((err: unknown) => {
      this.log.debug('measuring a writable layer failed', { containerId, dir, error: messageOf(err) });
      return { bytes: 0n, inodes: 0n };
    });
  }
}

/** The hold name of a container's image volume n (`<container>.iv<n>`). */
export function imageVolumeHolder(containerId: string, index: number): string {
  return `${containerId}.iv${index}`;
}

/** The container a hold belongs to: itself, or the container of an image volume hold. */
export function containerOfHolder(holder: string): string {
  return holder.replace(/\.iv\d+$/, '');
}
