/**
 * Image references, parsed and normalised as Kubernetes users expect (the grammar of
 * distribution/reference plus Docker's "familiar" names): `busybox` → `docker.io/library/busybox:latest`,
 * `host:port/repo:tag`, `repo@sha256:…`, `repo:tag@sha256:…`.
 */
import { invalidArgument } from '../common/errors.js';

/** A normalised reference: always a domain, a path, and a tag and/or a digest. */
export interface ImageReference {
  /** Registry host as written (`docker.io`, `127.0.0.1:5000`). */
  domain: string;
  /** Repository path inside the registry (`library/busybox`). */
  path: string;
  tag?: string;
  digest?: string;
}

export const DEFAULT_DOMAIN = 'docker.io';
const LEGACY_DEFAULT_DOMAIN = 'index.docker.io';
const OFFICIAL_REPO_PREFIX = 'library/';
export const DEFAULT_TAG = 'latest';
const NAME_TOTAL_LENGTH_MAX = 255;

const DOMAIN_COMPONENT = '(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])';
const DOMAIN_NAME = `${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*`;
const IPV6 = '\\[(?:[a-fA-F0-9:]+)\\]';
const DOMAIN_RE = new RegExp(`^(?:${DOMAIN_NAME}|${IPV6})(?::[0-9]+)?$`);
const PATH_COMPONENT_RE = /^[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*$/;
const TAG_RE = /^[\w][\w.-]{0,127}$/;
const DIGEST_RE = /^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$/;
const ID_RE = /^[a-f0-9]{64}$/;

/** Lengths of the hex part of the digest algorithms Stove verifies. */
export const DIGEST_HEX_LENGTH: Record<string, number> = { sha256: 64, sha512: 128 };

/** Checks a digest string (`sha256:<64 hex>` or `sha512:<128 hex>`); returns the reason or undefined. */
export function digestProblem(digest: string): string | undefined {
  if (!DIGEST_RE.test(digest)) return `invalid digest "${digest}"`;
  const [algorithm, hex] = digest.split(':') as [string, string];
  const length = DIGEST_HEX_LENGTH[algorithm];
  if (length === undefined) return `unsupported digest algorithm "${algorithm}" in "${digest}"`;
  if (hex.length !== length || !/^[a-f0-9]+$/.test(hex)) return `invalid ${algorithm} digest "${digest}": want ${length} lowercase hex characters`;
  return undefined;
}

function fail(ref: string, reason: string): never {
  throw invalidArgument(`invalid image reference "${ref}": ${reason}`);
}

/** Splits `name[:tag][@digest]` into its parts (no validation of the name yet). */
function splitTagAndDigest(ref: string): { name: string; tag?: string; digest?: string } {
  let rest = ref;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
  }
  let tag: string | undefined;
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
  }
  return { name: rest, tag, digest };
}

/** Splits a familiar name into domain and path the way Docker does. */
function splitDomain(name: string): { domain: string; path: string } {
  const slash = name.indexOf('/');
  const first = slash < 0 ? '' : name.slice(0, slash);
  let domain: string;
  let path: string;
  if (slash < 0 || (!first.includes('.') && !first.includes(':') && first !== 'localhost' && first.toLowerCase() === first)) {
    domain = DEFAULT_DOMAIN;
    path = name;
  } else {
    domain = first;
    path = name.slice(slash + 1);
  }
  if (domain === LEGACY_DEFAULT_DOMAIN) domain = DEFAULT_DOMAIN;
  if (domain === DEFAULT_DOMAIN && !path.includes('/')) path = OFFICIAL_REPO_PREFIX + path;
  return { domain, path };
}

/**
 * Parses and normalises a reference. Without a tag or digest the tag is `latest`. Throws
 * INVALID_ARGUMENT with the reason for anything distribution/reference would reject.
 */
export function parseReference(input: string): ImageReference {
  const ref = input.trim();
  if (ref === '') fail(input, 'reference is empty');
  if (ID_RE.test(ref)) fail(input, 'cannot specify 64-byte hexadecimal strings as a repository name');
  const { name, tag, digest } = splitTagAndDigest(ref);
  if (name === '') fail(input, 'repository name is empty');
  if (name.length > NAME_TOTAL_LENGTH_MAX) fail(input, `repository name must not be longer than ${NAME_TOTAL_LENGTH_MAX} characters`);
  const { domain, path } = splitDomain(name);
  if (!DOMAIN_RE.test(domain)) fail(input, `invalid registry host "${domain}"`);
  for (const component of path.split('/')) {
    if (component !== component.toLowerCase()) fail(input, 'repository name must be lowercase');
    if (!PATH_COMPONENT_RE.test(component)) fail(input, `invalid repository path component "${component}"`);
  }
  if (tag !== undefined && !TAG_RE.test(tag)) fail(input, `invalid tag "${tag}"`);
  if (digest !== undefined) {
    const problem = digestProblem(digest);
    if (problem) fail(input, problem);
  }
  return { domain, path, tag: tag ?? (digest ? undefined : DEFAULT_TAG), digest };
}

/** `domain/path`. */
export function repositoryName(ref: ImageReference): string {
  return `${ref.domain}/${ref.path}`;
}

/** The full normalised form: `domain/path[:tag][@digest]`. */
export function formatReference(ref: ImageReference): string {
  return repositoryName(ref) + (ref.tag ? `:${ref.tag}` : '') + (ref.digest ? `@${ref.digest}` : '');
}

/** `domain/path:tag`, or undefined for a digest-only reference. */
export function tagReference(ref: ImageReference): string | undefined {
  return ref.tag ? `${repositoryName(ref)}:${ref.tag}` : undefined;
}

/** `domain/path@digest` for a given manifest digest. */
export function digestReference(ref: ImageReference, digest: string): string {
  return `${repositoryName(ref)}@${digest}`;
}

/** True for a full image ID (`sha256:<64 hex>`) or its bare hex. */
export function looksLikeImageId(s: string): boolean {
  return ID_RE.test(s) || (s.startsWith('sha256:') && ID_RE.test(s.slice(7)));
}
