/**
 * Unpacked layers, one directory per chain ID, shared by every image that has the same layer stack:
 *
 *   <images>/layers/<chain hex>/diff/        the layer's files (whiteouts as overlayfs whiteouts)
 *   <images>/layers/<chain hex>/layer.json   what it is and how much space it takes
 *   <images>/l/<short>  →  ../layers/<chain hex>/diff
 *
 * The short links keep overlay `lowerdir=` strings small (mount data is limited to one page), as
 * Docker's overlay2 driver does. A layer is unpacked into a temp dir and renamed into place only
 * when complete and verified, so a layer dir that exists is always whole.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readdir, rename, rm, symlink, readlink, unlink, lstat } from 'node:fs/promises';
import { join } from 'node:path';
import { readJsonFile, writeJsonAtomic } from '../persist/atomic-file.js';
import { makeNode } from '../platform/mknod.js';
import type { LayerUsage } from './extract.js';
import type { Quarantine } from '../persist/quarantine.js';
import { failedPrecondition } from '../common/errors.js';

export interface LayerRecord {
  chainId: string;
  diffId: string;
  /** The blob it was unpacked from. */
  digest: string;
  /** Chain ID of the layer below, if any. */
  parent?: string;
  usage: LayerUsage;
  /** Name under `<images>/l/`. */
  link: string;
}

/** Chain IDs for diff IDs, bottom first: chain(0) = diff(0); chain(n) = sha256(chain(n-1) + " " + diff(n)). */
export function chainIds(diffIds: string[]): string[] {
  const out: string[] = [];
  for (const diffId of diffIds) {
    const previous = out[out.length - 1];
    out.push(previous ? `sha256:${createHash('sha256').update(`${previous} ${diffId}`).digest('hex')}` : diffId);
  }
  return out;
}

const hexOf = (digest: string) => digest.slice(digest.indexOf(':') + 1);

export class LayerStore {
  readonly layersDir: string;
  readonly linksDir: string;
  /** An empty directory, the lower layer of images that have none. */
  readonly emptyDir: string;
  readonly whiteoutTemplate: string;
  private readonly records = new Map<string, LayerRecord>();
  /** Layer dirs found without a layer.json at start-up (left alone). */
  readonly unrecorded: string[] = [];

  constructor(readonly imagesDir: string) {
    this.layersDir = join(imagesDir, 'layers');
    this.linksDir = join(imagesDir, 'l');
    this.emptyDir = join(imagesDir, 'empty');
    this.whiteoutTemplate = join(imagesDir, 'whiteout');
  }

  /**
   * Loads every complete layer and removes half-made or half-deleted ones (`.tmp-`/`.del-`). A layer
   * whose layer.json cannot be read is never removed: the record goes to `quarantine` and the files stay
   * (running containers may have them as a lower layer).
   */
  async init(quarantine?: Quarantine): Promise<void> {
    await mkdir(this.layersDir, { recursive: true, mode: 0o700 });
    await mkdir(this.linksDir, { recursive: true, mode: 0o700 });
    await mkdir(this.emptyDir, { recursive: true, mode: 0o755 });
    await this.ensureWhiteoutTemplate();
    for (const name of await readdir(this.layersDir)) {
      const dir = join(this.layersDir, name);
      if (name.startsWith('.')) {
        await rm(dir, { recursive: true, force: true });
        continue;
      }
      const recordPath = join(dir, 'layer.json');
      let record: LayerRecord | undefined;
      try {
        record = await readJsonFile<LayerRecord>(recordPath);
        if (record && (typeof record.chainId !== 'string' || hexOf(record.chainId) !== name || typeof record.link !== 'string'))
          throw new Error(`not the layer record of ${name}`);
      } catch (err) {
        await quarantine?.move('layer', name, recordPath, err);
        continue;
      }
      if (!record) {
        // A committed layer always has its record (written before the rename into place).
        if (!quarantine?.has('layer', name)) this.unrecorded.push(name);
        continue;
      }
      this.records.set(record.chainId, record);
      await this.ensureLink(record);
    }
    for (const link of await readdir(this.linksDir)) {
      const target = await readlink(join(this.linksDir, link)).catch(() => '');
      const hex = target.split('/')[2];
      if (hex && [...this.records.values()].some((r) => r.link === link)) continue;
      // A link to a layer that is there but not loaded (its record in quarantine) stays with it.
      if (hex && (await lstat(join(this.layersDir, hex)).then(() => true, () => false))) continue;
      await unlink(join(this.linksDir, link)).catch(() => {});
    }
  }

  private async ensureWhiteoutTemplate(): Promise<void> {
    const st = await lstat(this.whiteoutTemplate).catch(() => undefined);
    if (st?.isCharacterDevice() && st.rdev === 0) return;
    if (st) await rm(this.whiteoutTemplate, { force: true });
    await makeNode(this.whiteoutTemplate, { type: 'c', mode: 0, major: 0, minor: 0 });
  }

  get(chainId: string): LayerRecord | undefined {
    return this.records.get(chainId);
  }

  has(chainId: string): boolean {
    return this.records.has(chainId);
  }

  all(): LayerRecord[] {
    return [...this.records.values()];
  }

  diffDir(chainId: string): string {
    return join(this.layersDir, hexOf(chainId), 'diff');
  }

  /** A new temp dir with an empty `diff/` to unpack into. */
  async createTemp(): Promise<{ dir: string; diffDir: string }> {
    const dir = join(this.layersDir, `.tmp-${randomBytes(8).toString('hex')}`);
    await mkdir(join(dir, 'diff'), { recursive: true, mode: 0o755 });
    return { dir, diffDir: join(dir, 'diff') };
  }

  /** Moves an unpacked temp dir into place under its chain ID. */
  async commit(tempDir: string, record: Omit<LayerRecord, 'link'>): Promise<LayerRecord> {
    const full: LayerRecord = { ...record, link: this.linkNameFor(record.chainId) };
    await writeJsonAtomic(join(tempDir, 'layer.json'), full);
    await rename(tempDir, join(this.layersDir, hexOf(record.chainId)));
    await this.ensureLink(full);
    this.records.set(full.chainId, full);
    return full;
  }

  /** A short link name no other layer uses. */
  private linkNameFor(chainId: string): string {
    const hex = hexOf(chainId);
    for (let length = 12; length < hex.length; length += 4) {
      const name = hex.slice(0, length);
      const other = [...this.records.values()].find((r) => r.link === name);
      if (!other || other.chainId === chainId) return name;
    }
    return hex;
  }

  private async ensureLink(record: LayerRecord): Promise<void> {
    const path = join(this.linksDir, record.link);
    const want = `../layers/${hexOf(record.chainId)}/diff`;
    const have = await readlink(path).catch(() => undefined);
    if (have === want) return;
    if (have !== undefined) await unlink(path);
    await symlink(want, path);
  }

  /** Removes a layer: forgets it, then deletes its files (renamed first, so no half layer stays under its name). */
  async remove(chainId: string): Promise<void> {
    const record = this.records.get(chainId);
    if (!record) return;
    this.records.delete(chainId);
    await unlink(join(this.linksDir, record.link)).catch(() => {});
    const dir = join(this.layersDir, hexOf(chainId));
    const doomed = join(this.layersDir, `.del-${randomBytes(8).toString('hex')}`);
    await rename(dir, doomed).catch(() => {});
    await rm(doomed, { recursive: true, force: true });
  }

  /** `l/<short>` paths relative to the images dir, top layer first (overlay's lowerdir order). */
  lowerDirs(chainIdsBottomFirst: string[]): string[] {
    return chainIdsBottomFirst
      .slice()
      .reverse()
      .map((id) => {
        const record = this.records.get(id);
        if (!record) throw failedPrecondition(`layer ${id} is not unpacked`);
        return `l/${record.link}`;
      });
  }
}
