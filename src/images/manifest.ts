/**
 * Manifests and image configs: the OCI image index / Docker manifest list (pick linux/<host arch>,
 * variant-aware), the OCI image manifest / Docker schema 2 manifest, and the image config. Schema 1
 * is refused with a clear message.
 */
import { failedPrecondition, internal } from '../common/errors.js';
import { digestProblem } from './reference.js';
import { MANIFEST_MEDIA_TYPES as MT } from './registry-client.js';
import type { ImageConfigFile } from '../oci/index.js';

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  urls?: string[];
  platform?: Platform;
  annotations?: Record<string, string>;
}

export interface Platform {
  architecture: string;
  os: string;
  variant?: string;
}

export interface IndexManifest {
  kind: 'index';
  manifests: Descriptor[];
}

export interface ImageManifest {
  kind: 'image';
  mediaType: string;
  config: Descriptor;
  layers: Descriptor[];
}

/** An image config as parseImageConfig accepts it: its rootfs lists the layers' diff IDs. */
export type ImageConfig = ImageConfigFile & Required<Pick<ImageConfigFile, 'rootfs'>>;

const LAYER_MEDIA_TYPES = new Set([
  'application/vnd.oci.image.layer.v1.tar',
  'application/vnd.oci.image.layer.v1.tar+gzip',
  'application/vnd.oci.image.layer.v1.tar+zstd',
  'application/vnd.oci.image.layer.nondistributable.v1.tar',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+gzip',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+zstd',
  'application/vnd.docker.image.rootfs.diff.tar',
  'application/vnd.docker.image.rootfs.diff.tar.gzip',
  'application/vnd.docker.image.rootfs.foreign.diff.tar.gzip',
]);

function checkDescriptor(d: unknown, where: string): Descriptor {
  const desc = d as Descriptor;
  if (!desc || typeof desc !== 'object') throw internal(`${where}: descriptor is not an object`);
  if (typeof desc.digest !== 'string' || digestProblem(desc.digest)) throw internal(`${where}: invalid digest "${String(desc.digest)}"`);
  if (typeof desc.size !== 'number' || !Number.isInteger(desc.size) || desc.size < 0) throw internal(`${where}: invalid size for ${desc.digest}`);
  return desc;
}

/**
 * Parses a manifest body. The media type comes from Content-Type, else from the body itself.
 * `what` names the manifest in messages.
 */
export function parseManifest(body: Buffer, contentType: string, what: string): IndexManifest | ImageManifest {
  let doc: { schemaVersion?: number; mediaType?: string; manifests?: unknown[]; config?: unknown; layers?: unknown[]; fsLayers?: unknown };
  try {
    doc = JSON.parse(body.toString('utf8')) as typeof doc;
  } catch {
    throw internal(`${what}: manifest is not valid JSON`);
  }
  let mediaType = doc.mediaType || contentType;
  if (mediaType === 'application/json' || mediaType === 'text/plain' || !mediaType) {
    mediaType = doc.manifests ? MT.ociIndex : doc.config ? MT.ociManifest : doc.fsLayers ? MT.dockerSchema1 : mediaType;
  }
  if (doc.schemaVersion === 1 || mediaType === MT.dockerSchema1 || mediaType === MT.dockerSchema1Signed) {
    throw failedPrecondition(
      `${what} uses Docker image manifest schema 1, which is deprecated and not supported; push the image again with a current tool (schema 2 or OCI)`,
    );
  }
  if (mediaType === MT.ociIndex || mediaType === MT.dockerList) {
    if (!Array.isArray(doc.manifests)) throw internal(`${what}: index has no manifests list`);
    return { kind: 'index', manifests: doc.manifests.map((m, i) => checkDescriptor(m, `${what}: manifests[${i}]`)) };
  }
  if (mediaType === MT.ociManifest || mediaType === MT.dockerManifest) {
    if (!doc.config) throw internal(`${what}: manifest has no config`);
    const layers = (doc.layers ?? []).map((l, i) => checkDescriptor(l, `${what}: layers[${i}]`));
    for (const layer of layers) {
      if (!LAYER_MEDIA_TYPES.has(layer.mediaType))
        throw failedPrecondition(`${what}: layer ${layer.digest} has unsupported media type "${layer.mediaType}"`);
    }
    return { kind: 'image', mediaType, config: checkDescriptor(doc.config, `${what}: config`), layers };
  }
  throw failedPrecondition(`${what}: unsupported manifest media type "${mediaType}"`);
}

/** The platform Stove runs containers for, in OCI terms. */
export function hostPlatform(): Platform {
  const arch: Record<string, string> = { x64: 'amd64', arm64: 'arm64', arm: 'arm', ia32: '386', ppc64: 'ppc64le', s390x: 's390x', riscv64: 'riscv64', loong64: 'loong64' };
  const architecture = arch[process.arch] ?? process.arch;
  const platform: Platform = { os: 'linux', architecture };
  if (architecture === 'arm64') platform.variant = 'v8';
  if (architecture === 'arm') platform.variant = `v${(process.config.variables as { arm_version?: string }).arm_version ?? '7'}`;
  return platform;
}

export function formatPlatform(p: Partial<Platform>): string {
  return [p.os ?? '?', p.architecture ?? '?', p.variant].filter(Boolean).join('/');
}

/** Variants a platform can run, best first (arm64 v8 runs v8 or unset; arm v7 runs v7, v6, v5). */
function compatibleVariants(host: Platform): (string | undefined)[] {
  if (host.architecture === 'arm64') return ['v8', undefined];
  if (host.architecture === 'arm') {
    const n = Number((host.variant ?? 'v7').slice(1));
    const out: (string | undefined)[] = [];
    for (let v = n; v >= 5; v--) out.push(`v${v}`);
    out.push(undefined);
    return out;
  }
  return [host.variant, undefined];
}

/** The index entry for the host platform, or a clear error listing what the index offers. */
export function selectPlatform(index: IndexManifest, host: Platform, what: string): Descriptor {
  const candidates = index.manifests.filter((m) => m.platform?.os === host.os && m.platform?.architecture === host.architecture);
  for (const variant of compatibleVariants(host)) {
    const match = candidates.find((m) => (m.platform?.variant || undefined) === variant);
    if (match) return match;
  }
  const present = index.manifests.map((m) => (m.platform ? formatPlatform(m.platform) : 'unknown')).filter((p) => p !== 'unknown/unknown');
  throw failedPrecondition(
    `no match for platform ${formatPlatform(host)} in ${what}: it has ${present.length ? present.join(', ') : 'no platforms'}`,
  );
}

/** Parses and checks an image config against its manifest. */
export function parseImageConfig(body: Buffer, manifest: ImageManifest, what: string): ImageConfig {
  let config: ImageConfig;
  try {
    config = JSON.parse(body.toString('utf8')) as ImageConfig;
  } catch {
    throw internal(`${what}: image config is not valid JSON`);
  }
  const diffIds = config.rootfs?.diff_ids;
  if (!Array.isArray(diffIds)) throw internal(`${what}: image config has no rootfs.diff_ids`);
  if (diffIds.length !== manifest.layers.length)
    throw internal(`${what}: the manifest lists ${manifest.layers.length} layers but the config has ${diffIds.length} diff_ids`);
  for (const d of diffIds) if (typeof d !== 'string' || !d.startsWith('sha256:') || digestProblem(d)) throw internal(`${what}: invalid diff_id "${String(d)}"`);
  return config;
}
