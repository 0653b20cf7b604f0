/**
 * What image garbage collection keeps for records it could not read. A quarantined image, layer or
 * hold record may still describe content a container runs on, so everything it may reference is
 * kept: every digest and chain ID found in its raw bytes, and for each image it may name, the config
 * blob and the chain IDs of the config's diff IDs, down each layer's parents and blob. Everything else
 * is collected as usual, so one damaged record does not stop RemoveImage from freeing disk.
 */
import { open } from 'node:fs/promises';
import { messageOf } from '../common/errors.js';
import { chainIds, type LayerRecord } from '../storage/layers.js';

/** Records are small; a larger entry is read this far (what lies beyond is not protected). */
const MAX_RECORD_BYTES = 1 << 20;
/** pull.ts's cap on an image config. */
const MAX_CONFIG_BYTES = 16 << 20;
const HEX = /[a-f0-9]{64}/g;
const SHA256_HEX = /sha256:([a-f0-9]{64})/g;

/** A quarantine entry as far as garbage collection cares. */
export interface QuarantinedRecord {
  kind: string;
  id: string;
  path: string;
}

export interface GcProtectionSources {
  /** Image, layer and hold entries in quarantine. */
  quarantined: QuarantinedRecord[];
  /** Images that holds name but no readable record describes. */
  unrecordedImages: string[];
  /** The path of a blob in the content store. */
  blobPath(digest: string): string;
  layer(chainId: string): LayerRecord | undefined;
}

/** What collection must not delete, and why. */
export interface GcProtection {
  /** Hex of every chain ID and blob digest kept (`sha256:` dropped). */
  readonly hexes: ReadonlySet<string>;
  /** Image IDs a quarantined hold may name: RemoveImage refuses them, as it does for a live hold. */
  readonly heldImages: ReadonlySet<string>;
  /** What nothing can be learnt about (an entry that cannot be read, a held image without record or config): nothing is collected while it stays. */
  readonly blockers: string[];
}

/** Reads the first `max` bytes of a file. */
async function readHead(path: string, max: number): Promise<Buffer> {
  const handle = await open(path, 'r');
  try {
    const buffer = Buffer.alloc(max);
    const { bytesRead } = await handle.read(buffer, 0, max, 0);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

/** The diff IDs of an image config, bottom first: `rootfs.diff_ids`, or every digest in document order. */
function diffIdsOf(config: Buffer): string[] {
  const text = config.toString('latin1');
  try {
    const diffIds = (JSON.parse(text) as { rootfs?: { diff_ids?: unknown } }).rootfs?.diff_ids;
    if (Array.isArray(diffIds) && diffIds.every((d) => typeof d === 'string')) return diffIds as string[];
  } catch {
    // a damaged config: its digests in order are the best guess
  }
  return [...text.matchAll(SHA256_HEX)].map((m) => `sha256:${m[1]}`);
}

/** Builds the protection for the current quarantine (read once when the image store opens). */
export async function gcProtection(sources: GcProtectionSources): Promise<GcProtection> {
  const hexes = new Set<string>();
  const heldImages = new Set<string>();
  const blockers: string[] = [];
  const images = new Set<string>();
  for (const entry of sources.quarantined) {
    let text: string;
    try {
      text = (await readHead(entry.path, MAX_RECORD_BYTES)).toString('latin1');
    } catch (err) {
      blockers.push(`${entry.kind} record ${entry.id} in quarantine cannot be read (${messageOf(err)})`);
      continue;
    }
    for (const [hex] of text.matchAll(HEX)) hexes.add(hex);
    if (entry.kind === 'layer') hexes.add(entry.id);
    if (entry.kind === 'image') images.add(`sha256:${entry.id}`);
    // A hold's image is `sha256:<hex>`; its container ID is bare hex.
    if (entry.kind === 'hold') for (const [, hex] of text.matchAll(SHA256_HEX)) heldImages.add(`sha256:${hex!}`);
  }
  for (const image of [...images, ...heldImages]) await protectImage(image, sources, hexes);
  for (const image of sources.unrecordedImages) {
    if (!(await protectImage(image, sources, hexes))) blockers.push(`image ${image}, held by a container, has neither a record nor a config blob`);
  }
  const seen = new Set<string>();
  for (const hex of [...hexes]) protectLayerChain(`sha256:${hex}`, sources, hexes, seen);
  return { hexes, heldImages, blockers };
}

const hexOf = (digest: string) => digest.slice(digest.indexOf(':') + 1);

/** The config blob of an image and the chain IDs of its layers; false when the config cannot be read. */
async function protectImage(imageId: string, sources: GcProtectionSources, hexes: Set<string>): Promise<boolean> {
  if (!/^sha256:[a-f0-9]{64}$/.test(imageId)) return false;
  hexes.add(hexOf(imageId));
  const config = await readHead(sources.blobPath(imageId), MAX_CONFIG_BYTES).catch(() => undefined);
  if (!config) return false;
  for (const chainId of chainIds(diffIdsOf(config))) hexes.add(hexOf(chainId));
  return true;
}

/** A kept layer keeps its blob and every layer below it (`seen`: each layer once, even in a looped chain). */
function protectLayerChain(chainId: string, sources: GcProtectionSources, hexes: Set<string>, seen: Set<string>): void {
  for (let layer = sources.layer(chainId); layer && !seen.has(layer.chainId); layer = layer.parent ? sources.layer(layer.parent) : undefined) {
    seen.add(layer.chainId);
    hexes.add(hexOf(layer.chainId));
    hexes.add(hexOf(layer.digest));
  }
}
