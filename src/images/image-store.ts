/**
 * The image store: one JSON record per image under `<images>/records/<id hex>.json`, written only
 * after every blob and layer of the image is in place (so a partly pulled image is never listed),
 * and indexes by repo tag and repo digest kept in memory. The image ID is the config digest.
 */
import { mkdir, readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { readJsonFile, writeJsonAtomic } from '../persist/atomic-file.js';
import type { ImageConfig } from './manifest.js';
import type { Quarantine } from '../persist/quarantine.js';

export interface LayerRef {
  /** The compressed blob. */
  digest: string;
  mediaType: string;
  size: number;
  diffId: string;
  chainId: string;
}

export interface ImageRecord {
  /** `sha256:<config digest hex>`. */
  id: string;
  /** `domain/path:tag`. */
  repoTags: string[];
  /** `domain/path@<manifest or index digest>`. */
  repoDigests: string[];
  /** The platform manifest. */
  manifestDigest: string;
  /** Every blob this image keeps in the content store (manifests, config, layers). */
  blobs: string[];
  layers: LayerRef[];
  /** Sum of the config and compressed layer sizes, as containerd reports. */
  size: number;
  config: ImageConfig;
  pinned: boolean;
  /** When it was first pulled (ISO 8601). */
  pulledAt: string;
}

const hexOf = (id: string) => id.slice(id.indexOf(':') + 1);

export class ImageStore {
  private readonly dir: string;
  private readonly byId = new Map<string, ImageRecord>();
  private readonly byTag = new Map<string, string>();
  private readonly byDigest = new Map<string, string>();

  constructor(imagesDir: string) {
    this.dir = join(imagesDir, 'records');
  }

  /** Loads the records; an unreadable one goes to `quarantine` (without one it is skipped). */
  async init(quarantine?: Quarantine): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    for (const name of await readdir(this.dir)) {
      if (!name.endsWith('.json')) {
        // Temp files of interrupted writes (writeFileAtomic).
        await unlink(join(this.dir, name)).catch(() => {});
        continue;
      }
      const path = join(this.dir, name);
      const hex = name.slice(0, -'.json'.length);
      try {
        const record = await readJsonFile<ImageRecord>(path);
        if (!record || typeof record.id !== 'string' || hexOf(record.id) !== hex || !Array.isArray(record.layers) || !Array.isArray(record.blobs))
          throw new Error(`not the image record of ${hex}`);
        this.index(record);
      } catch (err) {
        await quarantine?.move('image', hex, path, err);
      }
    }
  }

  private index(record: ImageRecord): void {
    this.byId.set(record.id, record);
    for (const tag of record.repoTags) this.byTag.set(tag, record.id);
    for (const digest of record.repoDigests) this.byDigest.set(digest, record.id);
  }

  private unindex(record: ImageRecord): void {
    this.byId.delete(record.id);
    for (const tag of record.repoTags) if (this.byTag.get(tag) === record.id) this.byTag.delete(tag);
    for (const digest of record.repoDigests) if (this.byDigest.get(digest) === record.id) this.byDigest.delete(digest);
  }

  all(): ImageRecord[] {
    return [...this.byId.values()];
  }

  get(id: string): ImageRecord | undefined {
    return this.byId.get(id);
  }

  byRepoTag(tag: string): ImageRecord | undefined {
    const id = this.byTag.get(tag);
    return id ? this.byId.get(id) : undefined;
  }

  byRepoDigest(digest: string): ImageRecord | undefined {
    const id = this.byDigest.get(digest);
    return id ? this.byId.get(id) : undefined;
  }

  /** IDs starting with a hex prefix. */
  idsWithPrefix(hexPrefix: string): string[] {
    return [...this.byId.keys()].filter((id) => hexOf(id).startsWith(hexPrefix));
  }

  /**
   * Writes a record (new or changed) and moves its tags here from any other image, which keeps its
   * digests (a tag that moved leaves the old image reachable by digest, as containerd does).
   */
  async put(record: ImageRecord): Promise<void> {
    for (const tag of record.repoTags) {
      const other = this.byRepoTag(tag);
      if (other && other.id !== record.id) {
        const updated = { ...other, repoTags: other.repoTags.filter((t) => t !== tag) };
        await writeJsonAtomic(join(this.dir, `${hexOf(other.id)}.json`), updated);
        this.unindex(other);
        this.index(updated);
      }
    }
    await writeJsonAtomic(join(this.dir, `${hexOf(record.id)}.json`), record);
    const previous = this.byId.get(record.id);
    if (previous) this.unindex(previous);
    this.index(record);
  }

  async remove(id: string): Promise<void> {
    const record = this.byId.get(id);
    if (!record) return;
    await unlink(join(this.dir, `${hexOf(id)}.json`)).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
    this.unindex(record);
  }
}
