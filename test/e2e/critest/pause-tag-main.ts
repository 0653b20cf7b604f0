/**
 * `pause:3.9` for critest v1.36 in a registry the conformance kit filled (test/e2e/critest.sh with
 * MIRROR=own runs it after the kit's mkimages.py):
 *
 *   node dist/test/e2e/critest/pause-tag-main.js http://127.0.0.1:<port>
 *
 * critest v1.36's image specs pull `registry.k8s.io/pause:3.9` and `k8s.gcr.io/pause:3.9` and remove
 * one tag across registries; the kit pushes `pause:3.10` (the sandbox image) only. A copy of 3.10's
 * manifest under 3.9 would have the sandbox image's digest, and a runtime that pulls its sandbox image
 * (containerd) then fails the tag-removal spec. So 3.9 is an image of its own: 3.10's layers with 3.10's
 * config plus the label `org.opencontainers.image.version=3.9`. Deterministic (the same digest every
 * run, since the kit's images are); prints `pause:3.9@<digest>`.
 */
import { request } from 'undici';
import { MEDIA, pushBlob, pushManifest, sha256, type RegistryEndpoint } from '../../helpers/image-builder.js';

const REPO = 'pause';
const FROM = '3.10';
const TAG = '3.9';
/** Far above the kit's pause manifest and config (a few hundred bytes each). */
const MAX_BYTES = 64 * 1024;

interface Manifest {
  mediaType?: string;
  config: { mediaType: string; digest: string; size: number };
  layers: unknown[];
}

async function get(url: string, accept: string): Promise<Buffer> {
  const res = await request(url, { headers: { accept }, headersTimeout: 30_000, bodyTimeout: 30_000 });
  const body = Buffer.from(await res.body.arrayBuffer());
  if (res.statusCode !== 200) throw new Error(`GET ${url}: HTTP ${res.statusCode} ${body.subarray(0, 200).toString()}`);
  if (body.length > MAX_BYTES) throw new Error(`GET ${url}: ${body.length} bytes, more than ${MAX_BYTES}`);
  return body;
}

async function main(base: string): Promise<void> {
  const url = new URL(base);
  const registry: RegistryEndpoint = { host: url.host, url: url.origin, authorization: () => undefined };
  const manifestBody = await get(`${url.origin}/v2/${REPO}/manifests/${FROM}`, MEDIA.ociManifest);
  const manifest = JSON.parse(manifestBody.toString()) as Manifest;
  if (manifest.mediaType !== MEDIA.ociManifest || manifest.config.mediaType !== MEDIA.ociConfig) {
    throw new Error(`${REPO}:${FROM} is not an OCI image manifest (${manifest.mediaType}, config ${manifest.config.mediaType})`);
  }
  const configBody = await get(`${url.origin}/v2/${REPO}/blobs/${manifest.config.digest}`, MEDIA.ociConfig);
  if (sha256(configBody) !== manifest.config.digest) throw new Error(`${REPO}:${FROM}'s config does not match its digest`);
  const config = JSON.parse(configBody.toString()) as { config?: { Labels?: Record<string, string> } };
  config.config = { ...config.config, Labels: { ...config.config?.Labels, 'org.opencontainers.image.version': TAG } };
  const newConfig = Buffer.from(JSON.stringify(config));
  const configDigest = await pushBlob(registry, REPO, newConfig);
  const newManifest = Buffer.from(JSON.stringify({ ...manifest, config: { ...manifest.config, digest: configDigest, size: newConfig.length } }));
  const digest = await pushManifest(registry, REPO, TAG, newManifest, MEDIA.ociManifest);
  console.log(`${REPO}:${TAG}@${digest}`);
}

const base = process.argv[2];
if (!base) {
  console.error('usage: pause-tag-main.js http://127.0.0.1:<port>');
  process.exit(2);
}
main(base).catch((err: unknown) => {
  console.error(`pause-tag: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
