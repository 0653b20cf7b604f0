/**
 * Pulling one image: resolve the reference (a HEAD for a tag, nothing at all for a digest already
 * present), walk index → manifest → config, then fetch every missing layer in parallel (bounded by
 * max_concurrent_downloads). Each layer streams from the socket into an unpack worker that hashes,
 * stores and unpacks it in one pass. The image record is written last.
 */
import { rm, statfs } from 'node:fs/promises';
import { SingleFlight, KeyedMutex } from '../common/locks.js';
import { StoveError, failedPrecondition, internal, wrap, isKind } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import { BlobStore, digestAlgorithm, digestOf } from '../storage/blobs.js';
import { LayerStore, chainIds } from '../storage/layers.js';
import { LayerJobError, UnpackPool } from '../storage/unpack-pool.js';
import { RegistryClient, type RegistrySession } from './registry-client.js';
import { parseManifest, parseImageConfig, selectPlatform, hostPlatform, formatPlatform, type Descriptor, type ImageManifest, type Platform } from './manifest.js';
import { digestReference, formatReference, tagReference, type ImageReference } from './reference.js';
import type { ImageRecord, ImageStore, LayerRef } from './image-store.js';
import { PullProgress } from './progress.js';
import type { Telemetry } from '../observability/hooks.js';
import type { Credentials } from './auth.js';
import { enforce, needsSignatures, refuseRejected, type PolicyStore, type PullPolicy } from './trust/enforce.js';

const MAX_CONFIG_BYTES = 16 << 20;
const MAX_INDEX_DEPTH = 4;

/** Counts holders per key: blobs and layers a pull in progress relies on (GC leaves them alone). */
export class Leases {
  private readonly counts = new Map<string, number>();

  acquire(keys: string[]): () => void {
    for (const k of keys) this.counts.set(k, (this.counts.get(k) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      for (const k of keys) {
        const n = (this.counts.get(k) ?? 1) - 1;
        if (n <= 0) this.counts.delete(k);
        else this.counts.set(k, n);
      }
    };
  }

  has(key: string): boolean {
    return this.counts.has(key);
  }
}

/** A counting semaphore (download slots). */
export class Semaphore {
  private waiting: (() => void)[] = [];
  private free: number;

  constructor(size: number) {
    this.free = size;
  }

  /** Resolves with the release once a slot is free; rejects (waiting no more) when `signal` aborts first. */
  async acquire(signal?: AbortSignal): Promise<() => void> {
    signal?.throwIfAborted();
    if (this.free > 0) this.free--;
    else {
      await new Promise<void>((resolve, reject) => {
        const granted = () => {
          signal?.removeEventListener('abort', gaveUp);
          resolve();
        };
        const gaveUp = () => {
          this.waiting = this.waiting.filter((w) => w !== granted);
          reject(signal!.reason as Error);
        };
        this.waiting.push(granted);
        signal?.addEventListener('abort', gaveUp, { once: true });
      });
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    };
  }
}

export interface PullerDeps {
  blobs: BlobStore;
  layers: LayerStore;
  store: ImageStore;
  client: RegistryClient;
  pool: UnpackPool;
  leases: Leases;
  /** Per-key locks shared with garbage collection: chain IDs and blob digests. */
  locks: KeyedMutex;
  /** Pull metrics and unpack spans. */
  telemetry: Telemetry;
  log: Logger;
  maxConcurrentDownloads: number;
  /** fdatasync blobs before committing them. */
  syncBlobs: boolean;
  /** Where the progress snapshot of a reference goes (undefined: none). */
  progressFile?: (reference: string) => string;
  platform?: Platform;
  /** The signature policy every pull must satisfy (undefined: none). */
  policies?: PolicyStore;
  /** `images.max_layer_size`: bytes of one layer's uncompressed tar stream at most. */
  maxLayerSize?: number;
  /** `images.max_image_size`: bytes all unpacked layers of one image may occupy. */
  maxImageSize?: number;
  /** `images.min_free_space`: bytes that must stay free on the image filesystem while unpacking. */
  minFreeSpace?: number;
  /** Removes layers and blobs no image references (after a pull refused for a cap). */
  discard?: (chainIds: string[], blobs: string[]) => Promise<void>;
  /** Normalised references that are reported as pinned. */
  isPinned?: (record: Pick<ImageRecord, 'repoTags' | 'repoDigests'>) => boolean;
}

interface LayerJob {
  desc: Descriptor;
  diffId: string;
  chainId: string;
  parent?: string;
}

export class Puller {
  private readonly pulls = new SingleFlight<ImageRecord>();
  private readonly layerFlights = new SingleFlight<void>();
  private readonly blobFlights = new Map<string, Promise<void>>();
  private readonly slots: Semaphore;
  private readonly platform: Platform;

  constructor(private readonly deps: PullerDeps) {
    this.slots = new Semaphore(Math.max(1, deps.maxConcurrentDownloads));
    this.platform = deps.platform ?? hostPlatform();
  }

  /**
   * Pulls (or finds) an image; concurrent pulls of one reference share the work. `namespace` (the
   * pod's, when the pull carries a sandbox config) selects a per-namespace signature policy. When
   * `signal` aborts this caller stops waiting; the downloads stop once no caller waits for them any
   * more (the failure path removes what they left).
   */
  pull(ref: ImageReference, creds?: Credentials, namespace?: string, signal?: AbortSignal): Promise<ImageRecord> {
    const name = formatReference(ref);
    // Pulls under different namespaces may answer to different policies: they share nothing.
    return this.pulls.run(`${name}\0${namespace ?? ''}`, async (wanted) => {
      const progress = new PullProgress(name, this.deps.progressFile?.(name), this.deps.log);
      try {
        const policy = await this.deps.policies?.forPull(ref, namespace);
        if (policy) refuseRejected(policy, ref);
        const record = await this.pullOnce(ref, creds, progress, policy, wanted);
        // The last snapshot is on disk before the answer: `stove pull` draws it once the call returns,
        // and no write of this pull is left to run beside the caller's next request.
        await progress.finish(record.id);
        return record;
      } catch (err) {
        await progress.fail(err);
        throw err;
      }
    }, signal);
  }

  /** A record whose layers and blobs are all still on disk. */
  private async complete(record: ImageRecord | undefined): Promise<ImageRecord | undefined> {
    if (!record) return undefined;
    for (const layer of record.layers) if (!this.deps.layers.has(layer.chainId)) return undefined;
    for (const digest of record.blobs) if (!(await this.deps.blobs.has(digest))) return undefined;
    return record;
  }

  /** Adds the pulled reference's tag and digest to a present image. */
  private async remember(record: ImageRecord, ref: ImageReference, topDigest: string): Promise<ImageRecord> {
    const tag = tagReference(ref);
    const digest = digestReference(ref, topDigest);
    const tags = tag && !record.repoTags.includes(tag) ? [...record.repoTags, tag] : record.repoTags;
    const digests = record.repoDigests.includes(digest) ? record.repoDigests : [...record.repoDigests, digest];
    if (tags === record.repoTags && digests === record.repoDigests) return record;
    const updated = { ...record, repoTags: tags, repoDigests: digests };
    updated.pinned = this.deps.isPinned?.(updated) ?? false;
    await this.deps.store.put(updated);
    return updated;
  }

  private async pullOnce(
    ref: ImageReference,
    creds: Credentials | undefined,
    progress: PullProgress,
    policy: PullPolicy | undefined,
    signal: AbortSignal,
  ): Promise<ImageRecord> {
    const { store } = this.deps;
    const name = formatReference(ref);
    // Signatures are checked for the top-level manifest digest before anything is stored.
    const verify = async (session: RegistrySession, digest: string) => {
      if (!policy) return;
      const { signedBy } = await enforce(policy, ref, digest, session);
      if (signedBy.length) this.deps.log.info('image signature verified', { image: name, digest, policy: policy.file, scope: policy.scope, signedBy });
    };

    // Present by digest: no network at all, unless the policy wants signatures.
    if (ref.digest) {
      const present = await this.complete(store.byRepoDigest(digestReference(ref, ref.digest)));
      if (present) {
        if (policy && needsSignatures(policy)) await verify(await this.deps.client.session(ref, creds), ref.digest);
        return this.remember(present, ref, ref.digest);
      }
    }
    const session = await this.deps.client.session(ref, creds);

    // A tag: one HEAD tells whether it still points where it did.
    if (!ref.digest) {
      const head = await session.headManifest(ref.tag!, signal);
      if (head.digest) {
        const present = await this.complete(store.byRepoDigest(digestReference(ref, head.digest)));
        if (present) {
          await verify(session, head.digest);
          return this.remember(present, ref, head.digest);
        }
      }
    }

    const top = await session.getManifest(ref.digest ?? ref.tag!, undefined, signal);
    const topDigest = digestOf(top.body, ref.digest ? digestAlgorithm(ref.digest) : 'sha256');
    if (ref.digest && topDigest !== ref.digest)
      throw internal(`manifest digest mismatch for "${name}": the registry sent content with digest ${topDigest}`);
    await verify(session, topDigest);
    const manifestBlobs: { digest: string; body: Buffer }[] = [{ digest: topDigest, body: top.body }];
    let parsed = parseManifest(top.body, top.mediaType, `manifest of "${name}"`);
    let manifestDigest = topDigest;
    for (let depth = 0; parsed.kind === 'index'; depth++) {
      if (depth >= MAX_INDEX_DEPTH) throw failedPrecondition(`"${name}": image indexes nested too deep`);
      const choice = selectPlatform(parsed, this.platform, `image index of "${name}"`);
      const child = await session.getManifest(choice.digest, undefined, signal);
      const actual = digestOf(child.body, digestAlgorithm(choice.digest));
      if (actual !== choice.digest)
        throw internal(`manifest digest mismatch for "${name}" (${formatPlatform(this.platform)}): expected ${choice.digest}, got ${actual}`);
      manifestBlobs.push({ digest: choice.digest, body: child.body });
      manifestDigest = choice.digest;
      parsed = parseManifest(child.body, child.mediaType || choice.mediaType, `manifest ${choice.digest} of "${name}"`);
    }
    const manifest: ImageManifest = parsed;
    const id = manifest.config.digest;
    const config = await this.fetchConfig(session, manifest, name, signal);
    if (manifestBlobs.length === 1) this.checkPlatform(config, name);

    const diffIds = config.rootfs.diff_ids;
    const chains = chainIds(diffIds);
    const jobs: LayerJob[] = manifest.layers.map((desc, i) => ({ desc, diffId: diffIds[i]!, chainId: chains[i]!, parent: chains[i - 1] }));
    const blobs = [...new Set([...manifestBlobs.map((m) => m.digest), id, ...manifest.layers.map((l) => l.digest)])];
    const release = this.deps.leases.acquire([...blobs, ...chains]);
    let exhausted = false;
    try {
      progress.setLayers(manifest.layers);
      try {
        await this.fetchLayers(session, jobs, name, progress, signal);
        this.checkImageSize(jobs, name);
      } catch (err) {
        exhausted = isKind(err, 'ResourceExhausted');
        throw err;
      }
      for (const m of manifestBlobs) await this.deps.blobs.put(m.digest, m.body);
      const layers: LayerRef[] = jobs.map((j) => ({ digest: j.desc.digest, mediaType: j.desc.mediaType, size: j.desc.size, diffId: j.diffId, chainId: j.chainId }));
      const existing = store.get(id);
      const tag = tagReference(ref);
      const record: ImageRecord = {
        id,
        repoTags: [...new Set([...(existing?.repoTags ?? []), ...(tag ? [tag] : [])])],
        repoDigests: [...new Set([...(existing?.repoDigests ?? []), digestReference(ref, topDigest)])],
        manifestDigest,
        blobs: [...new Set([...(existing?.blobs ?? []), ...blobs])],
        layers,
        size: manifest.config.size + manifest.layers.reduce((a, l) => a + l.size, 0),
        config,
        pinned: false,
        pulledAt: existing?.pulledAt ?? new Date().toISOString(),
      };
      record.pinned = this.deps.isPinned?.(record) ?? false;
      await store.put(record);
      return record;
    } finally {
      release();
      // A pull refused for size or space leaves none of its layers behind (others' stay: GC checks).
      if (exhausted) await this.deps.discard?.(chains, manifest.layers.map((l) => l.digest)).catch(() => {});
    }
  }

  /** All layers of one image together within images.max_image_size. */
  private checkImageSize(jobs: LayerJob[], name: string): void {
    const max = this.deps.maxImageSize;
    if (max === undefined) return;
    const total = jobs.reduce((sum, j) => sum + (this.deps.layers.get(j.chainId)?.usage.bytes ?? 0), 0);
    if (total > max)
      throw new StoveError('ResourceExhausted', `image "${name}" takes ${total} bytes unpacked, more than images.max_image_size (${max})`);
  }

  /** Refuses to start a layer that would leave less than images.min_free_space free. */
  private async checkFreeSpace(desc: Descriptor, name: string): Promise<void> {
    const min = this.deps.minFreeSpace;
    if (min === undefined) return;
    const st = await statfs(this.deps.layers.layersDir);
    const free = st.bavail * st.bsize;
    if (free - desc.size < min)
      throw new StoveError(
        'ResourceExhausted',
        `not enough free space to unpack layer ${desc.digest} (${desc.size} bytes compressed) of "${name}": ${free} bytes free, images.min_free_space is ${min}`,
      );
  }

  private async fetchConfig(session: RegistrySession, manifest: ImageManifest, name: string, signal: AbortSignal) {
    const digest = manifest.config.digest;
    let body: Buffer;
    const release = this.deps.leases.acquire([digest]);
    try {
      if (await this.deps.blobs.has(digest)) {
        body = await this.deps.blobs.read(digest);
      } else {
        body = await session.getBlob(digest, MAX_CONFIG_BYTES, signal);
        const actual = digestOf(body, digestAlgorithm(digest));
        if (actual !== digest) throw internal(`image config digest mismatch for "${name}": expected ${digest}, got ${actual}`);
        await this.deps.blobs.put(digest, body);
      }
    } finally {
      release();
    }
    return parseImageConfig(body, manifest, `image "${name}"`);
  }

  /** A single-platform image must still be for this platform (as containerd checks). */
  private checkPlatform(config: { os?: string; architecture?: string; variant?: string }, name: string): void {
    if (!config.os && !config.architecture) return;
    const ok = (!config.os || config.os === this.platform.os) && (!config.architecture || config.architecture === this.platform.architecture);
    if (!ok)
      throw failedPrecondition(
        `image "${name}" is for platform ${formatPlatform({ os: config.os, architecture: config.architecture, variant: config.variant })}, not ${formatPlatform(this.platform)}`,
      );
  }

  private async fetchLayers(session: RegistrySession, jobs: LayerJob[], name: string, progress: PullProgress, signal: AbortSignal): Promise<void> {
    const results = await Promise.allSettled(jobs.map((job) => this.ensureLayer(session, job, name, progress, signal)));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  /**
   * Makes sure a layer is unpacked and its blob stored; one flight per chain ID, shared by the pulls
   * of every image with that layer (and stopped only when all of them gave up).
   */
  private ensureLayer(session: RegistrySession, job: LayerJob, name: string, progress: PullProgress, signal: AbortSignal): Promise<void> {
    const attributes = { 'layer.digest': job.desc.digest, 'layer.size': job.desc.size };
    return this.deps.telemetry.tracer
      .span('pullLayer', attributes, () =>
        this.layerFlights.run(
          job.chainId,
          (wanted) => this.deps.locks.run(job.chainId, () => this.ensureLayerLocked(session, job, name, progress, wanted)),
          signal,
        ),
      )
      .then(
        () => {
          // Another pull may have done this layer: make sure our own progress shows it complete.
          progress.state(job.desc.digest, 'present');
        },
        (err: unknown) => {
          progress.state(job.desc.digest, 'failed');
          throw err;
        },
      );
  }

  private async ensureLayerLocked(session: RegistrySession, job: LayerJob, name: string, progress: PullProgress, signal: AbortSignal): Promise<void> {
    const { layers, blobs } = this.deps;
    const { desc } = job;
    // Another chain with the same blob may be downloading it right now: wait, then use the stored copy.
    const inFlight = this.blobFlights.get(desc.digest);
    if (inFlight) await inFlight.catch(() => {});
    const haveLayer = layers.has(job.chainId);
    const haveBlob = await blobs.has(desc.digest);
    if (haveLayer && haveBlob) return;

    const releaseSlot = await this.slots.acquire(signal);
    try {
      if (haveBlob) {
        progress.state(desc.digest, 'unpacking');
        await this.unpack(job, name, undefined);
      } else {
        progress.state(desc.digest, 'downloading');
        const download = this.unpack(job, name, { session, progress, storeOnly: haveLayer, signal });
        this.blobFlights.set(desc.digest, download);
        try {
          await download;
        } finally {
          this.blobFlights.delete(desc.digest);
        }
      }
      progress.state(desc.digest, 'done');
    } finally {
      releaseSlot();
    }
  }

  /**
   * Runs one worker job: from the network (hash + store + unpack in one pass) or from the stored
   * blob (unpack only). Verifies the blob digest, its size and the diff ID, then commits; on any
   * failure nothing of the layer stays on disk.
   */
  private async unpack(
    job: LayerJob,
    name: string,
    network: { session: RegistrySession; progress: PullProgress; storeOnly: boolean; signal: AbortSignal } | undefined,
  ): Promise<void> {
    const { blobs, layers } = this.deps;
    const { desc } = job;
    await this.checkFreeSpace(desc, name);
    const temp = network?.storeOnly ? undefined : await layers.createTemp();
    const ingest = network ? blobs.ingestPath(desc.digest) : undefined;
    try {
      const source = network?.session.blobStream(
        desc.digest,
        desc.size,
        (n) => {
          this.deps.telemetry.metrics.imagePullBytes(n);
          network.progress.bytes(desc.digest, n);
        },
        network.signal,
      );
      const started = performance.now();
      const result = await this.deps.telemetry.tracer.span('unpack', { 'layer.digest': desc.digest, 'layer.source': network ? 'registry' : 'blob' }, () => this.deps.pool.run(
        {
          digestAlgorithm: digestAlgorithm(desc.digest),
          blobPath: ingest,
          sync: this.deps.syncBlobs,
          sourcePath: network ? undefined : blobs.path(desc.digest),
          unpackDir: temp?.diffDir,
          whiteoutTemplate: layers.whiteoutTemplate,
          maxTarBytes: Math.min(this.deps.maxLayerSize ?? Infinity, this.deps.maxImageSize ?? Infinity),
          minFreeBytes: this.deps.minFreeSpace,
        },
        source,
      ));
      this.deps.telemetry.metrics.layerUnpacked((performance.now() - started) / 1000);
      if (result.digest !== desc.digest)
        throw internal(`layer digest mismatch: expected ${desc.digest}, got ${result.digest} (${result.size} bytes)`);
      if (result.size !== desc.size) throw internal(`layer ${desc.digest} is ${result.size} bytes, but its descriptor says ${desc.size}`);
      if (result.decodeError) throw new LayerJobError(result.decodeError, 'format');
      if (temp && result.diffId !== job.diffId)
        throw internal(`layer ${desc.digest}: uncompressed digest ${result.diffId} does not match the image config's diff_id ${job.diffId}`);
      if (ingest) await blobs.commit(ingest, desc.digest);
      if (temp) await layers.commit(temp.dir, { chainId: job.chainId, diffId: job.diffId, digest: desc.digest, parent: job.parent, usage: result.usage! });
    } catch (err) {
      if (temp) await rm(temp.dir, { recursive: true, force: true });
      if (ingest) await rm(ingest, { force: true });
      throw this.layerError(err, desc.digest, name);
    }
  }

  private layerError(err: unknown, digest: string, name: string): StoveError {
    if (err instanceof LayerJobError) {
      if (err.reason === 'unsafe') return failedPrecondition(`layer ${digest} of "${name}" was rejected as unsafe: ${err.message}`);
      if (err.reason === 'format') return failedPrecondition(`layer ${digest} of "${name}" is not a valid layer: ${err.message}`);
      if (err.reason === 'too-large' || err.reason === 'no-space') return new StoveError('ResourceExhausted', `layer ${digest} of "${name}": ${err.message}`);
      return internal(`unpacking layer ${digest} of "${name}": ${err.message}`);
    }
    if (isKind(err, 'Internal') && (err as Error).message.includes('mismatch')) return wrap(err, `"${name}"`);
    return err instanceof StoveError ? err : wrap(err, `fetching layer ${digest} of "${name}"`);
  }
}
