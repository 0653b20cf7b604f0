/**
 * Cosign's key-based signatures as stored in a registry: for manifest digest `sha256:H`, an OCI
 * manifest at tag `sha256-H.sig` in the same repository whose layers of media type
 * `application/vnd.dev.cosign.simplesigning.v1+json` each hold a simple-signing payload, with the
 * base64 signature of that payload in the layer annotation `dev.cosignproject.cosign/signature`.
 *
 * Everything here is untrusted until verified: sizes and counts are bounded before anything is
 * fetched, every payload is checked against its descriptor's digest, a payload is parsed only after
 * its signature verified with a policy key.
 */
import { createPublicKey, verify, type KeyObject } from 'node:crypto';
import { failedPrecondition } from '../../common/errors.js';
import { duplicateKey } from '../../common/json.js';
import { digestAlgorithm, digestOf } from '../../storage/blobs.js';
import { digestProblem } from '../reference.js';

export const SIMPLE_SIGNING_MEDIA_TYPE = 'application/vnd.dev.cosign.simplesigning.v1+json';
export const SIGNATURE_ANNOTATION = 'dev.cosignproject.cosign/signature';
export const COSIGN_SIGNATURE_TYPE = 'cosign container image signature';

/** Bounds on what a registry can make a pull read for its signatures. */
export const MAX_SIGNATURE_MANIFEST_BYTES = 1 << 20;
export const MAX_SIGNATURE_LAYERS = 64;
export const MAX_PAYLOAD_BYTES = 256 << 10;
const MAX_SIGNATURE_BASE64_LENGTH = 16 << 10;

/** What fetching signatures needs from a registry session. */
export interface SignatureSource {
  /** A manifest by tag, or NotFound; at most maxBytes. */
  getManifest(reference: string, maxBytes: number): Promise<{ body: Buffer }>;
  getBlob(digest: string, maxBytes: number): Promise<Buffer>;
}

export interface UntrustedSignature {
  payload: Buffer;
  /** The base64 signature annotation, if the layer had one. */
  base64Signature?: string;
}

export interface FetchedSignatures {
  signatures: UntrustedSignature[];
  /** Layers of other media types (attestations, SBOMs): not signatures. */
  otherAttachments: number;
}

/** The tag cosign stores a manifest's signatures under: `sha256-<hex>.sig`. */
export function signatureTag(manifestDigest: string): string {
  return manifestDigest.replace(':', '-') + '.sig';
}

/** The signatures stored for a manifest digest (none when the tag does not exist). */
export async function fetchSignatures(source: SignatureSource, manifestDigest: string): Promise<FetchedSignatures> {
  let body: Buffer;
  try {
    ({ body } = await source.getManifest(signatureTag(manifestDigest), MAX_SIGNATURE_MANIFEST_BYTES));
  } catch (err) {
    if ((err as { kind?: string }).kind === 'NotFound') return { signatures: [], otherAttachments: 0 };
    throw err;
  }
  const what = `signature manifest ${signatureTag(manifestDigest)}`;
  let doc: { layers?: unknown };
  try {
    doc = JSON.parse(body.toString('utf8')) as typeof doc;
  } catch {
    throw failedPrecondition(`${what} is not valid JSON`);
  }
  if (!doc || typeof doc !== 'object' || !Array.isArray(doc.layers)) throw failedPrecondition(`${what} has no layers list`);
  if (doc.layers.length > MAX_SIGNATURE_LAYERS) throw failedPrecondition(`${what} has ${doc.layers.length} layers, more than the ${MAX_SIGNATURE_LAYERS} Stove reads`);
  const out: FetchedSignatures = { signatures: [], otherAttachments: 0 };
  for (const [i, raw] of doc.layers.entries()) {
    const layer = raw as { mediaType?: unknown; digest?: unknown; size?: unknown; annotations?: unknown };
    if (!layer || typeof layer !== 'object') throw failedPrecondition(`${what}: layers[${i}] is not an object`);
    if (layer.mediaType !== SIMPLE_SIGNING_MEDIA_TYPE) {
      out.otherAttachments++;
      continue;
    }
    if (typeof layer.digest !== 'string' || digestProblem(layer.digest)) throw failedPrecondition(`${what}: layers[${i}] has an invalid digest`);
    if (typeof layer.size !== 'number' || !Number.isInteger(layer.size) || layer.size < 0 || layer.size > MAX_PAYLOAD_BYTES)
      throw failedPrecondition(`${what}: layers[${i}] has size ${String(layer.size)}; a payload may be at most ${MAX_PAYLOAD_BYTES} bytes`);
    const payload = await source.getBlob(layer.digest, layer.size);
    if (payload.length !== layer.size || digestOf(payload, digestAlgorithm(layer.digest)) !== layer.digest)
      throw failedPrecondition(`${what}: payload ${layer.digest} does not match its digest or size`);
    const annotations = layer.annotations && typeof layer.annotations === 'object' ? (layer.annotations as Record<string, unknown>) : {};
    const sig = annotations[SIGNATURE_ANNOTATION];
    out.signatures.push({ payload, base64Signature: typeof sig === 'string' ? sig : undefined });
  }
  return out;
}

/** A public key the policy trusts, with the label used in messages. */
export interface TrustedKey {
  key: KeyObject;
  label: string;
}

/** Loads a PEM public key of a kind cosign signs with (ECDSA P-256/P-384/P-521, RSA, Ed25519). */
export function loadPublicKey(pem: string, label: string): TrustedKey {
  let key: KeyObject;
  try {
    key = createPublicKey({ key: pem, format: 'pem' });
  } catch (err) {
    throw failedPrecondition(`public key ${label} is not a PEM public key: ${(err as Error).message}`);
  }
  const type = key.asymmetricKeyType;
  const curve = key.asymmetricKeyDetails?.namedCurve;
  const ok = type === 'rsa' || type === 'ed25519' || (type === 'ec' && ['prime256v1', 'secp384r1', 'secp521r1'].includes(curve ?? ''));
  if (!ok) throw failedPrecondition(`public key ${label} is ${type}${curve ? ` (${curve})` : ''}; cosign keys are ECDSA P-256/P-384/P-521, RSA or Ed25519`);
  return { key, label };
}

/** Standard base64, as Go's decoder accepts it (no whitespace, padding required). */
function decodeBase64(s: string): Buffer | undefined {
  if (s.length > MAX_SIGNATURE_BASE64_LENGTH || s.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(s)) return undefined;
  return Buffer.from(s, 'base64');
}

/**
 * True when the signature of the payload verifies with the key, with the hash sigstore hard-codes:
 * SHA-256 for ECDSA (ASN.1 DER signatures) and RSA (PKCS #1 v1.5), none for Ed25519.
 */
function verifiesWith(key: KeyObject, payload: Buffer, signature: Buffer): boolean {
  try {
    if (key.asymmetricKeyType === 'ed25519') return verify(null, payload, key, signature);
    return verify('sha256', payload, key.asymmetricKeyType === 'ec' ? { key, dsaEncoding: 'der' } : key, signature);
  } catch {
    return false;
  }
}

/** The key that signed the payload, if one of them did. */
export function signingKey(signature: UntrustedSignature, keys: TrustedKey[]): TrustedKey | undefined {
  const raw = signature.base64Signature === undefined ? undefined : decodeBase64(signature.base64Signature);
  if (!raw) return undefined;
  return keys.find((k) => verifiesWith(k.key, signature.payload, raw));
}

export interface SimpleSigningPayload {
  dockerManifestDigest: string;
  dockerReference: string;
}

/** Exactly these keys, or a reason. */
function exactKeys(v: unknown, keys: string[], where: string): Record<string, unknown> {
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error(`${where} is not a JSON object`);
  const have = Object.keys(v);
  for (const k of have) if (!keys.includes(k)) throw new Error(`${where} has unknown field "${k}"`);
  for (const k of keys) if (!have.includes(k)) throw new Error(`${where} is missing "${k}"`);
  return v as Record<string, unknown>;
}

/**
 * Parses a verified payload as containers/image does: `critical` with exactly `type`, `image`
 * (`docker-manifest-digest`) and `identity` (`docker-reference`); `optional` may hold anything, but
 * a `timestamp` there must be an integer and a `creator` a string. Throws the reason.
 */
export function parsePayload(payload: Buffer): SimpleSigningPayload {
  const text = payload.toString('utf8');
  const doc = exactKeys(JSON.parse(text), ['critical', 'optional'], 'the payload');
  const twice = duplicateKey(text);
  if (twice !== undefined) throw new Error(`key ${JSON.stringify(twice)} appears twice in one object`);
  if (doc.optional !== null) {
    const optional = doc.optional as Record<string, unknown>;
    if (!optional || typeof optional !== 'object' || Array.isArray(optional)) throw new Error('payload "optional" is not a JSON object');
    if ('timestamp' in optional && !Number.isInteger(optional.timestamp)) throw new Error('payload optional.timestamp is not an integer');
    if ('creator' in optional && typeof optional.creator !== 'string') throw new Error('payload optional.creator is not a string');
  }
  const critical = exactKeys(doc.critical, ['type', 'image', 'identity'], 'payload "critical"');
  if (critical.type !== COSIGN_SIGNATURE_TYPE) throw new Error(`unrecognised signature type ${JSON.stringify(critical.type)}`);
  const image = exactKeys(critical.image, ['docker-manifest-digest'], 'payload critical.image');
  const identity = exactKeys(critical.identity, ['docker-reference'], 'payload critical.identity');
  const digest = image['docker-manifest-digest'];
  if (typeof digest !== 'string' || digestProblem(digest)) throw new Error(`invalid docker-manifest-digest ${JSON.stringify(digest)}`);
  const reference = identity['docker-reference'];
  if (typeof reference !== 'string') throw new Error('docker-reference is not a string');
  return { dockerManifestDigest: digest, dockerReference: reference };
}
