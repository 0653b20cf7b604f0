/**
 * Builds container images in the test process and pushes them to a test registry with the
 * distribution v2 push API, so no test ever needs an image from outside.
 *
 *   const reg = await startRegistry();
 *   const img = await pushBusyboxImage(reg, 'test/busybox:latest');            // cmd ["sh"]
 *   const app = await pushBusyboxImage(reg, 'test/app:1', { cmd: ['sleep', '3600'], user: '1000',
 *     extraFiles: [{ path: 'etc/app.conf', content: 'x=1\n' }] });
 *   img.reference  // "127.0.0.1:<port>/test/busybox:latest"
 *
 * Layers are tars written here (ustar + PAX records, or GNU long names), so tests can put any entry
 * into them: devices, fifos, hardlinks, whiteouts, xattrs with binary values, hostile paths.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { gzipSync, zstdCompressSync, constants as zlibConstants } from 'node:zlib';
import { execFileSync } from 'node:child_process';
import { request } from 'undici';
import type { TestRegistry } from './registry.js';

/** What a push needs of a registry: a test's own, or one a script started (the e2e cluster's). */
export type RegistryEndpoint = Pick<TestRegistry, 'host' | 'url' | 'dispatcher' | 'authorization'>;

// ---------------------------------------------------------------------------------------------
// Layer entries and the tar writer

interface EntryBase {
  /** Path inside the layer, relative (`bin/sh`); written as is, so `../x` or `/abs` stay hostile. */
  path: string;
  mode?: number;
  uid?: number;
  gid?: number;
  /** Seconds since the epoch (may be fractional: written as a PAX mtime then). */
  mtime?: number;
  /** Extended attributes, written as PAX `SCHILY.xattr.<name>` records (binary values kept exact). */
  xattrs?: Record<string, string | Uint8Array>;
}

export type LayerEntry =
  | (EntryBase & { type?: 'file'; content?: string | Uint8Array })
  | (EntryBase & { type: 'dir' })
  | (EntryBase & { type: 'symlink'; target: string })
  | (EntryBase & { type: 'hardlink'; target: string })
  | (EntryBase & { type: 'char' | 'block'; major: number; minor: number })
  | (EntryBase & { type: 'fifo' })
  /** `dir/.wh.name`: deletes `name` from lower layers. */
  | { type: 'whiteout'; path: string }
  /** `dir/.wh..wh..opq`: hides everything lower layers had in `dir`. */
  | { type: 'opaque'; path: string };

export type Compression = 'gzip' | 'zstd' | 'none';

export interface TarOptions {
  /** How names over 100 bytes are written: PAX `path` records (default) or GNU `L`/`K` entries. */
  longNames?: 'pax' | 'gnu';
}

const DEFAULT_MTIME = 1_700_000_000;
const BLOCK = 512;

function octal(value: number, width: number): string {
  return value.toString(8).padStart(width - 1, '0') + '\0';
}

function fitsOctal(value: number, width: number): boolean {
  return Number.isInteger(value) && value >= 0 && value < 8 ** (width - 1);
}

function paxRecord(key: string, value: string | Uint8Array): Buffer {
  const v = typeof value === 'string' ? Buffer.from(value, 'utf8') : Buffer.from(value);
  const body = Buffer.concat([Buffer.from(` ${key}=`), v, Buffer.from('\n')]);
  let len = body.length + 1;
  while (String(len).length + body.length !== len) len = String(len).length + body.length;
  return Buffer.concat([Buffer.from(String(len)), body]);
}

function padded(data: Buffer): Buffer[] {
  const rest = data.length % BLOCK;
  return rest === 0 ? [data] : [data, Buffer.alloc(BLOCK - rest)];
}

interface RawHeader {
  name: string;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtime: number;
  typeflag: string;
  linkname?: string;
  devmajor?: number;
  devminor?: number;
}

function encodeHeader(h: RawHeader): Buffer {
  const buf = Buffer.alloc(BLOCK);
  buf.write(h.name, 0, 100, 'utf8');
  buf.write(octal(h.mode & 0o7777, 8), 100, 'ascii');
  buf.write(octal(h.uid, 8), 108, 'ascii');
  buf.write(octal(h.gid, 8), 116, 'ascii');
  buf.write(octal(h.size, 12), 124, 'ascii');
  buf.write(octal(Math.floor(h.mtime), 12), 136, 'ascii');
  buf.write('        ', 148, 'ascii');
  buf.write(h.typeflag, 156, 'ascii');
  if (h.linkname) buf.write(h.linkname, 157, 100, 'utf8');
  buf.write('ustar\0', 257, 'ascii');
  buf.write('00', 263, 'ascii');
  buf.write(octal(h.devmajor ?? 0, 8), 329, 'ascii');
  buf.write(octal(h.devminor ?? 0, 8), 337, 'ascii');
  let sum = 0;
  for (const b of buf) sum += b;
  buf.write(octal(sum, 7) + ' ', 148, 'ascii');
  return buf;
}

const TYPEFLAGS = { file: '0', hardlink: '1', symlink: '2', char: '3', block: '4', dir: '5', fifo: '6' } as const;

/** One entry as tar blocks (with its PAX or GNU long-name preamble when needed). */
function entryBlocks(entry: LayerEntry, options: TarOptions): Buffer[] {
  if (entry.type === 'whiteout' || entry.type === 'opaque') {
    const slash = entry.path.lastIndexOf('/');
    const dir = slash >= 0 ? entry.path.slice(0, slash + 1) : '';
    const base = entry.path.slice(slash + 1);
    const name = entry.type === 'opaque' ? `${entry.path.replace(/\/$/, '')}/.wh..wh..opq` : `${dir}.wh.${base}`;
    return entryBlocks({ type: 'file', path: name, mode: 0o644, content: '' }, options);
  }
  const type = entry.type ?? 'file';
  const content =
    type === 'file' ? Buffer.from((entry as { content?: string | Uint8Array }).content ?? '') : Buffer.alloc(0);
  let name = entry.path;
  if (type === 'dir' && !name.endsWith('/')) name += '/';
  const linkname = type === 'symlink' || type === 'hardlink' ? (entry as { target: string }).target : undefined;
  const defaultMode = type === 'dir' ? 0o755 : type === 'symlink' ? 0o777 : 0o644;
  const mtime = entry.mtime ?? DEFAULT_MTIME;
  const uid = entry.uid ?? 0;
  const gid = entry.gid ?? 0;

  const pax: Buffer[] = [];
  const gnu: Buffer[] = [];
  const nameLong = Buffer.byteLength(name) > 100;
  const linkLong = linkname !== undefined && Buffer.byteLength(linkname) > 100;
  if (options.longNames === 'gnu') {
    if (nameLong) gnu.push(...gnuLongEntry('L', name));
    if (linkLong) gnu.push(...gnuLongEntry('K', linkname!));
  } else {
    if (nameLong) pax.push(paxRecord('path', name));
    if (linkLong) pax.push(paxRecord('linkpath', linkname!));
  }
  if (!fitsOctal(uid, 8)) pax.push(paxRecord('uid', String(uid)));
  if (!fitsOctal(gid, 8)) pax.push(paxRecord('gid', String(gid)));
  if (!Number.isInteger(mtime)) pax.push(paxRecord('mtime', mtime.toFixed(9)));
  for (const [key, value] of Object.entries(entry.xattrs ?? {})) pax.push(paxRecord(`SCHILY.xattr.${key}`, value));

  const header = encodeHeader({
    name: nameLong ? name.slice(0, 99) : name,
    mode: entry.mode ?? defaultMode,
    uid: fitsOctal(uid, 8) ? uid : 0,
    gid: fitsOctal(gid, 8) ? gid : 0,
    size: content.length,
    mtime,
    typeflag: TYPEFLAGS[type],
    linkname: linkLong ? linkname!.slice(0, 99) : linkname,
    devmajor: type === 'char' || type === 'block' ? (entry as { major: number }).major : undefined,
    devminor: type === 'char' || type === 'block' ? (entry as { minor: number }).minor : undefined,
  });
  const blocks: Buffer[] = [...gnu];
  if (pax.length > 0) {
    const data = Buffer.concat(pax);
    blocks.push(
      encodeHeader({ name: `PaxHeaders/${name.slice(0, 80)}`, mode: 0o644, uid: 0, gid: 0, size: data.length, mtime, typeflag: 'x' }),
      ...padded(data),
    );
  }
  blocks.push(header, ...padded(content));
  return blocks;
}

function gnuLongEntry(flag: 'L' | 'K', value: string): Buffer[] {
  const data = Buffer.concat([Buffer.from(value, 'utf8'), Buffer.alloc(1)]);
  return [
    encodeHeader({ name: '././@LongLink', mode: 0o644, uid: 0, gid: 0, size: data.length, mtime: 0, typeflag: flag }),
    ...padded(data),
  ];
}

/** A tar archive of the entries, in order, ending with two zero blocks. */
export function buildTar(entries: LayerEntry[], options: TarOptions = {}): Buffer {
  const blocks: Buffer[] = [];
  for (const entry of entries) blocks.push(...entryBlocks(entry, options));
  blocks.push(Buffer.alloc(BLOCK * 2));
  return Buffer.concat(blocks);
}

// ---------------------------------------------------------------------------------------------
// Layers, configs, manifests

export function sha256(data: Uint8Array | string): string {
  return 'sha256:' + createHash('sha256').update(data).digest('hex');
}

export interface BuiltLayer {
  /** The blob as pushed (compressed or not). */
  blob: Buffer;
  /** Digest of the blob. */
  digest: string;
  /** Digest of the uncompressed tar (config rootfs.diff_ids). */
  diffId: string;
  compression: Compression;
}

/** Compresses a tar (or raw bytes) into a layer blob. */
export function compressLayer(tar: Buffer, compression: Compression): BuiltLayer {
  const blob =
    compression === 'gzip'
      ? gzipSync(tar, { level: 1 })
      : compression === 'zstd'
        ? zstdCompressSync(tar, { params: { [zlibConstants.ZSTD_c_compressionLevel]: 3 } })
        : tar;
  return { blob, digest: sha256(blob), diffId: sha256(tar), compression };
}

/** Builds a layer from entries. */
export function buildLayer(entries: LayerEntry[], compression: Compression = 'gzip', options: TarOptions = {}): BuiltLayer {
  return compressLayer(buildTar(entries, options), compression);
}

export type MediaTypes = 'oci' | 'docker';

export const MEDIA = {
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociConfig: 'application/vnd.oci.image.config.v1+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerConfig: 'application/vnd.docker.container.image.v1+json',
} as const;

function layerMediaType(media: MediaTypes, compression: Compression): string {
  if (media === 'docker' && compression === 'gzip') return 'application/vnd.docker.image.rootfs.diff.tar.gzip';
  if (media === 'docker' && compression === 'none') return 'application/vnd.docker.image.rootfs.diff.tar';
  return { gzip: 'application/vnd.oci.image.layer.v1.tar+gzip', zstd: 'application/vnd.oci.image.layer.v1.tar+zstd', none: 'application/vnd.oci.image.layer.v1.tar' }[compression];
}

/** The image settings a test usually cares about (OCI image config `config` section). */
export interface ImageSettings {
  cmd?: string[];
  entrypoint?: string[];
  /** `KEY=value` entries; PATH is set unless given. */
  env?: string[];
  user?: string;
  workdir?: string;
  labels?: Record<string, string>;
  stopSignal?: string;
  exposedPorts?: string[];
  volumes?: string[];
}

export interface Platform {
  architecture: string;
  os: string;
  variant?: string;
}

/** The host's platform as OCI spells it (`amd64`, `arm64`, …). */
export function hostPlatform(): Platform {
  const arch = { x64: 'amd64', arm64: 'arm64', arm: 'arm', ia32: '386', ppc64: 'ppc64le', s390x: 's390x', riscv64: 'riscv64' }[
    process.arch as string
  ];
  return { architecture: arch ?? process.arch, os: 'linux' };
}

const DEFAULT_PATH = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** An OCI image config JSON document. */
export function imageConfig(diffIds: string[], settings: ImageSettings = {}, platform: Platform = hostPlatform()): Buffer {
  const env = settings.env ?? [];
  const config: Record<string, unknown> = {
    Env: env.some((e) => e.startsWith('PATH=')) ? env : [DEFAULT_PATH, ...env],
  };
  if (settings.cmd) config.Cmd = settings.cmd;
  if (settings.entrypoint) config.Entrypoint = settings.entrypoint;
  if (settings.user !== undefined) config.User = settings.user;
  if (settings.workdir !== undefined) config.WorkingDir = settings.workdir;
  if (settings.labels) config.Labels = settings.labels;
  if (settings.stopSignal) config.StopSignal = settings.stopSignal;
  if (settings.exposedPorts) config.ExposedPorts = Object.fromEntries(settings.exposedPorts.map((p) => [p, {}]));
  if (settings.volumes) config.Volumes = Object.fromEntries(settings.volumes.map((v) => [v, {}]));
  return Buffer.from(
    JSON.stringify({
      created: '2024-01-01T00:00:00Z',
      architecture: platform.architecture,
      ...(platform.variant ? { variant: platform.variant } : {}),
      os: platform.os,
      config,
      rootfs: { type: 'layers', diff_ids: diffIds },
      history: diffIds.map((_d, i) => ({ created: '2024-01-01T00:00:00Z', created_by: `stove test layer ${i}` })),
    }),
  );
}

// ---------------------------------------------------------------------------------------------
// The registry push API

/** `repo:tag` or `repo@digest` (without the host) split into its parts. */
export function splitName(name: string): { repo: string; tag: string } {
  const at = name.indexOf('@');
  if (at >= 0) return { repo: name.slice(0, at), tag: name.slice(at + 1) };
  const colon = name.lastIndexOf(':');
  if (colon > name.lastIndexOf('/')) return { repo: name.slice(0, colon), tag: name.slice(colon + 1) };
  return { repo: name, tag: 'latest' };
}

function headers(registry: RegistryEndpoint, extra: Record<string, string> = {}): Record<string, string> {
  const auth = registry.authorization();
  return auth ? { ...extra, authorization: auth } : extra;
}

/** Uploads a blob (monolithic upload) unless the repository has it already. */
export async function pushBlob(registry: RegistryEndpoint, repo: string, data: Uint8Array, digest = sha256(data)): Promise<string> {
  const head = await request(`${registry.url}/v2/${repo}/blobs/${digest}`, { method: 'HEAD', headers: headers(registry), dispatcher: registry.dispatcher });
  await head.body.dump();
  if (head.statusCode === 200) return digest;
  const start = await request(`${registry.url}/v2/${repo}/blobs/uploads/`, { method: 'POST', headers: headers(registry), dispatcher: registry.dispatcher });
  await start.body.dump();
  if (start.statusCode !== 202) throw new Error(`blob upload to ${repo} refused: HTTP ${start.statusCode}`);
  const location = new URL(String(start.headers.location), registry.url);
  location.searchParams.set('digest', digest);
  const put = await request(location, {
    method: 'PUT',
    headers: headers(registry, { 'content-type': 'application/octet-stream', 'content-length': String(data.length) }),
    body: data,
    dispatcher: registry.dispatcher,
  });
  const text = await put.body.text();
  if (put.statusCode !== 201) throw new Error(`blob ${digest} upload to ${repo} failed: HTTP ${put.statusCode} ${text}`);
  return digest;
}

/** Puts a manifest under a tag (or its digest); returns the manifest digest. */
export async function pushManifest(registry: RegistryEndpoint, repo: string, reference: string, body: Buffer, mediaType: string): Promise<string> {
  const res = await request(`${registry.url}/v2/${repo}/manifests/${reference}`, {
    method: 'PUT',
    headers: headers(registry, { 'content-type': mediaType }),
    body,
    dispatcher: registry.dispatcher,
  });
  const text = await res.body.text();
  if (res.statusCode !== 201) throw new Error(`manifest ${repo}:${reference} push failed: HTTP ${res.statusCode} ${text}`);
  return sha256(body);
}

export interface PushedImage {
  /** `127.0.0.1:<port>/repo:tag`. */
  reference: string;
  /** `127.0.0.1:<port>/repo@sha256:…`. */
  digestReference: string;
  /** `127.0.0.1:<port>/repo`. */
  repository: string;
  manifestDigest: string;
  manifestMediaType: string;
  manifestSize: number;
  /** The image ID a runtime reports (config digest). */
  configDigest: string;
  config: Buffer;
  layers: BuiltLayer[];
  platform: Platform;
}

export interface PushImageOptions extends ImageSettings {
  /** Layers (built, or entries built here with `compression`), bottom first. */
  layers: (BuiltLayer | LayerEntry[])[];
  compression?: Compression;
  mediaTypes?: MediaTypes;
  platform?: Platform;
  /** Push by digest only (no tag). */
  untagged?: boolean;
  /** The manifest's annotations (e.g. a checkpoint image's). */
  annotations?: Record<string, string>;
}

/** Builds and pushes one image; `name` is `repo[:tag]` (no host). */
export async function pushImage(registry: RegistryEndpoint, name: string, options: PushImageOptions): Promise<PushedImage> {
  const { repo, tag } = splitName(name);
  const media = options.mediaTypes ?? 'oci';
  const platform = options.platform ?? hostPlatform();
  const layers = options.layers.map((l) => (Array.isArray(l) ? buildLayer(l, options.compression ?? 'gzip') : l));
  const config = imageConfig(layers.map((l) => l.diffId), options, platform);
  for (const layer of layers) await pushBlob(registry, repo, layer.blob, layer.digest);
  const configDigest = await pushBlob(registry, repo, config);
  const manifestMediaType = media === 'oci' ? MEDIA.ociManifest : MEDIA.dockerManifest;
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: manifestMediaType,
      config: { mediaType: media === 'oci' ? MEDIA.ociConfig : MEDIA.dockerConfig, digest: configDigest, size: config.length },
      layers: layers.map((l) => ({ mediaType: layerMediaType(media, l.compression), digest: l.digest, size: l.blob.length })),
      ...(options.annotations ? { annotations: options.annotations } : {}),
    }),
  );
  const manifestDigest = sha256(manifest);
  await pushManifest(registry, repo, options.untagged ? manifestDigest : tag, manifest, manifestMediaType);
  return {
    reference: `${registry.host}/${repo}:${tag}`,
    digestReference: `${registry.host}/${repo}@${manifestDigest}`,
    repository: `${registry.host}/${repo}`,
    manifestDigest,
    manifestMediaType,
    manifestSize: manifest.length,
    configDigest,
    config,
    layers,
    platform,
  };
}

export interface PushedIndex {
  reference: string;
  digestReference: string;
  indexDigest: string;
  images: PushedImage[];
}

/**
 * Pushes a multi-platform index (OCI) or manifest list (Docker) over images already pushed to the
 * same repository (push them `untagged`).
 */
export async function pushIndex(registry: RegistryEndpoint, name: string, images: PushedImage[], mediaTypes: MediaTypes = 'oci'): Promise<PushedIndex> {
  const { repo, tag } = splitName(name);
  const mediaType = mediaTypes === 'oci' ? MEDIA.ociIndex : MEDIA.dockerList;
  const body = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType,
      manifests: images.map((img) => ({
        mediaType: img.manifestMediaType,
        digest: img.manifestDigest,
        size: img.manifestSize,
        platform: img.platform,
      })),
    }),
  );
  const indexDigest = await pushManifest(registry, repo, tag, body, mediaType);
  return { reference: `${registry.host}/${repo}:${tag}`, digestReference: `${registry.host}/${repo}@${indexDigest}`, indexDigest, images };
}

// ---------------------------------------------------------------------------------------------
// busybox images

export const BUSYBOX_BIN = process.env.BUSYBOX_BIN ?? '/bin/busybox';

/** Users and groups in every busybox image (uid/gid 1000 is `user`, 65534 is `nobody`). */
export const PASSWD = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
user:x:1000:1000:user:/home/user:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
`;
export const GROUP = `root:x:0:
daemon:x:1:
bin:x:2:
www-data:x:33:
users:x:100:user
user:x:1000:
nogroup:x:65534:
`;

let appletCache: string[] | undefined;

/** The applet names the installed busybox offers. */
export function busyboxApplets(): string[] {
  appletCache ??= execFileSync(BUSYBOX_BIN, ['--list'], { encoding: 'utf8' })
    .split('\n')
    .filter((a) => a && a !== 'busybox');
  return appletCache;
}

export interface BusyboxRootOptions {
  /** Applets as symlinks to busybox (default) or as hardlinks (as the official busybox image). */
  applets?: 'symlink' | 'hardlink';
}

/** Entries of a minimal root: busybox-static in /bin with every applet, /etc/passwd and /etc/group. */
export function busyboxRootEntries(options: BusyboxRootOptions = {}): LayerEntry[] {
  const entries: LayerEntry[] = [];
  for (const d of ['bin', 'dev', 'etc', 'home', 'proc', 'sys', 'usr', 'usr/bin', 'usr/sbin', 'var', 'var/www', 'run'])
    entries.push({ type: 'dir', path: d });
  entries.push({ type: 'dir', path: 'root', mode: 0o700 });
  entries.push({ type: 'dir', path: 'tmp', mode: 0o1777 });
  entries.push({ type: 'dir', path: 'home/user', uid: 1000, gid: 1000 });
  entries.push({ path: 'bin/busybox', mode: 0o755, content: readFileSync(BUSYBOX_BIN) });
  for (const applet of busyboxApplets()) {
    // A hard link's header carries busybox's mode, as Docker writes it: containerd (like moby) applies every
    // entry's mode, a hard link's too, to the inode the link shares with bin/busybox.
    entries.push(
      options.applets === 'hardlink'
        ? { type: 'hardlink', path: `bin/${applet}`, target: 'bin/busybox', mode: 0o755 }
        : { type: 'symlink', path: `bin/${applet}`, target: 'busybox' },
    );
  }
  entries.push({ path: 'etc/passwd', content: PASSWD });
  entries.push({ path: 'etc/group', content: GROUP });
  entries.push({ path: 'etc/hostname', content: 'busybox\n' });
  return entries;
}

const busyboxLayers = new Map<string, BuiltLayer>();

/** The busybox root as one layer, built once per process for each compression and applet style. */
export function busyboxLayer(compression: Compression = 'gzip', options: BusyboxRootOptions = {}): BuiltLayer {
  const key = `${compression}/${options.applets ?? 'symlink'}`;
  let layer = busyboxLayers.get(key);
  if (!layer) {
    layer = buildLayer(busyboxRootEntries(options), compression);
    busyboxLayers.set(key, layer);
  }
  return layer;
}

export interface BusyboxImageOptions extends ImageSettings, BusyboxRootOptions {
  /** Files (or any entries) added in a second layer on top of the busybox root. */
  extraFiles?: LayerEntry[];
  /** More layers on top (after extraFiles). */
  extraLayers?: (BuiltLayer | LayerEntry[])[];
  compression?: Compression;
  mediaTypes?: MediaTypes;
  platform?: Platform;
  untagged?: boolean;
}

/**
 * Pushes a busybox image (`name` = `repo[:tag]`, no host) whose default command is `sh` unless
 * `cmd`/`entrypoint` say otherwise. Returns the references and digests a test needs.
 */
export async function pushBusyboxImage(registry: RegistryEndpoint, name: string, options: BusyboxImageOptions = {}): Promise<PushedImage> {
  const compression = options.compression ?? 'gzip';
  const layers: (BuiltLayer | LayerEntry[])[] = [busyboxLayer(compression, options)];
  if (options.extraFiles?.length) layers.push(options.extraFiles);
  layers.push(...(options.extraLayers ?? []));
  return pushImage(registry, name, {
    ...options,
    cmd: options.cmd ?? (options.entrypoint ? undefined : ['sh']),
    layers,
    compression,
  });
}
