/**
 * Cosign-format signatures made with Node's crypto, pushed where cosign puts them: for manifest
 * digest `sha256:H`, an OCI manifest at tag `sha256-H.sig` whose simple-signing layers carry the
 * payload and, in an annotation, its base64 signature.
 */
import { generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { MEDIA, pushBlob, pushManifest, sha256 } from './image-builder.js';
import type { TestRegistry } from './registry.js';

export type KeyKind = 'p256' | 'p384' | 'rsa' | 'ed25519';

export interface SigningKey {
  kind: KeyKind;
  privateKey: KeyObject;
  /** The public key as PEM (what a policy's keyPath file holds). */
  publicPem: string;
}

export function signingKey(kind: KeyKind = 'p256'): SigningKey {
  const pair =
    kind === 'rsa'
      ? generateKeyPairSync('rsa', { modulusLength: 2048 })
      : kind === 'ed25519'
        ? generateKeyPairSync('ed25519')
        : generateKeyPairSync('ec', { namedCurve: kind === 'p256' ? 'P-256' : 'P-384' });
  return { kind, privateKey: pair.privateKey, publicPem: pair.publicKey.export({ type: 'spki', format: 'pem' }).toString() };
}

/** cosign's simple-signing payload for a manifest digest and the reference it was signed as. */
export function simpleSigningPayload(manifestDigest: string, dockerReference: string): Buffer {
  return Buffer.from(
    JSON.stringify({
      critical: {
        identity: { 'docker-reference': dockerReference },
        image: { 'docker-manifest-digest': manifestDigest },
        type: 'cosign container image signature',
      },
      optional: null,
    }),
  );
}

/** The signature of a payload as sigstore makes it (SHA-256; ECDSA in DER; PKCS #1 v1.5 for RSA). */
export function signPayload(key: SigningKey, payload: Buffer): string {
  return sign(key.kind === 'ed25519' ? null : 'sha256', payload, key.privateKey).toString('base64');
}

export interface SignatureLayer {
  payload: Buffer;
  /** Base64 signature; undefined leaves the annotation out. */
  signature?: string;
  mediaType?: string;
}

/** Pushes the signature manifest for `manifestDigest` into `repo` (replacing one already there). */
export async function pushSignatures(registry: TestRegistry, repo: string, manifestDigest: string, layers: SignatureLayer[]): Promise<void> {
  const config = Buffer.from('{"architecture":"","os":"","config":{},"rootfs":{"type":"layers","diff_ids":[]}}');
  await pushBlob(registry, repo, config);
  const descriptors = [];
  for (const layer of layers) {
    await pushBlob(registry, repo, layer.payload);
    descriptors.push({
      mediaType: layer.mediaType ?? 'application/vnd.dev.cosign.simplesigning.v1+json',
      digest: sha256(layer.payload),
      size: layer.payload.length,
      ...(layer.signature !== undefined ? { annotations: { 'dev.cosignproject.cosign/signature': layer.signature } } : {}),
    });
  }
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MEDIA.ociManifest,
      config: { mediaType: MEDIA.ociConfig, digest: sha256(config), size: config.length },
      layers: descriptors,
    }),
  );
  await pushManifest(registry, repo, manifestDigest.replace(':', '-') + '.sig', manifest, MEDIA.ociManifest);
}

/** Signs a pushed image as cosign would: payload naming `reference` and `manifestDigest`, pushed to `repo`. */
export async function cosignSign(registry: TestRegistry, repo: string, manifestDigest: string, reference: string, key: SigningKey): Promise<void> {
  const payload = simpleSigningPayload(manifestDigest, reference);
  await pushSignatures(registry, repo, manifestDigest, [{ payload, signature: signPayload(key, payload) }]);
}
