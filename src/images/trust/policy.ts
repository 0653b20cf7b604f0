/**
 * containers-policy.json(5): the file CRI-O and podman read. Parsed strictly (an unknown key or
 * requirement type is an error, never a silent accept); only the `docker` transport applies to
 * Stove's pulls, other transports are checked for form and otherwise ignored.
 *
 * Scopes of `transports.docker` are looked up most specific first, as containers/image does:
 * `host[:port]/repo:tag` (or `@digest`), `host[:port]/repo`, each parent namespace, `host[:port]`,
 * then wildcard domains `*.sub.example.com`, `*.example.com`, `*.com` (the port dropped), then the
 * transport's `""` scope, then `default`.
 */
import { duplicateKey } from '../../common/json.js';
import { repositoryName, type ImageReference } from '../reference.js';
import { parseSignedReference, type SignedIdentityRule } from './identity.js';

export type Requirement =
  | { type: 'insecureAcceptAnything' }
  | { type: 'reject' }
  | { type: 'sigstoreSigned'; keys: KeySource[]; signedIdentity: SignedIdentityRule };

/** A public key named by the policy: a file read at each check, or inline PEM. */
export type KeySource = { path: string } | { pem: string; label: string };

export interface Policy {
  default: Requirement[];
  /** `transports.docker`, by scope ("" is the transport default). */
  docker: Map<string, Requirement[]>;
}

/** A policy file that does not say what Stove can enforce. */
export class PolicyFormatError extends Error {}

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Checks an object has only the allowed keys and returns it. */
function object(v: unknown, where: string, allowed: readonly string[]): Json {
  if (!isObject(v)) throw new PolicyFormatError(`${where} must be a JSON object`);
  for (const key of Object.keys(v)) if (!allowed.includes(key)) throw new PolicyFormatError(`${where}: unknown key "${key}"`);
  return v;
}

function string(v: unknown, where: string): string {
  if (typeof v !== 'string' || v === '') throw new PolicyFormatError(`${where} must be a non-empty string`);
  return v;
}

function stringList(v: unknown, where: string): string[] {
  if (!Array.isArray(v) || v.length === 0) throw new PolicyFormatError(`${where} must be a non-empty list of strings`);
  return v.map((s, i) => string(s, `${where}[${i}]`));
}

/** Go's []byte in JSON: standard base64. */
function base64Bytes(v: unknown, where: string): Buffer {
  const s = string(v, where);
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(s) || s.length % 4 !== 0) throw new PolicyFormatError(`${where} must be base64`);
  return Buffer.from(s, 'base64');
}

/** Parses the file's text. Throws PolicyFormatError naming what is wrong. */
export function parsePolicy(text: string): Policy {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new PolicyFormatError(`not valid JSON: ${(err as Error).message}`);
  }
  const twice = duplicateKey(text);
  if (twice !== undefined) throw new PolicyFormatError(`key ${JSON.stringify(twice)} appears twice in one object`);
  const top = object(doc, 'the policy', ['default', 'transports']);
  if (top.default === undefined) throw new PolicyFormatError('"default" is missing');
  const policy: Policy = { default: requirements(top.default, '"default"'), docker: new Map() };
  if (top.transports !== undefined) {
    if (!isObject(top.transports)) throw new PolicyFormatError('"transports" must be a JSON object');
    for (const [transport, scopes] of Object.entries(top.transports)) {
      if (!isObject(scopes)) throw new PolicyFormatError(`transports.${transport} must be a JSON object`);
      for (const [scope, reqs] of Object.entries(scopes)) {
        const parsed = requirements(reqs, `transports.${transport}["${scope}"]`);
        if (transport !== 'docker') continue;
        checkDockerScope(scope);
        policy.docker.set(scope, parsed);
      }
    }
  }
  return policy;
}

/** Refuses scope forms that could never match (containers/image ignores them silently). */
function checkDockerScope(scope: string): void {
  if (scope === '') return;
  const where = `transports.docker: scope "${scope}"`;
  if (scope.startsWith('*.')) {
    if (!/^\*\.[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*$/.test(scope)) throw new PolicyFormatError(`${where}: a wildcard scope is "*." and a domain, without port or path`);
    return;
  }
  if (/\s/.test(scope) || scope.includes('*')) throw new PolicyFormatError(`${where} is not a registry, repository or image reference`);
}

function requirements(v: unknown, where: string): Requirement[] {
  if (!Array.isArray(v) || v.length === 0) throw new PolicyFormatError(`${where} must be a non-empty list of requirements`);
  return v.map((r, i) => requirement(r, `${where}[${i}]`));
}

function requirement(v: unknown, where: string): Requirement {
  if (!isObject(v)) throw new PolicyFormatError(`${where} must be a JSON object`);
  switch (v.type) {
    case 'insecureAcceptAnything':
    case 'reject':
      object(v, where, ['type']);
      return { type: v.type };
    case 'sigstoreSigned':
      return sigstoreSigned(v, where);
    case 'signedBy':
    case 'signedBaseLayer':
      throw new PolicyFormatError(`${where}: requirement type "${v.type}" (GPG simple signing) is not supported by Stove; use "sigstoreSigned"`);
    default:
      throw new PolicyFormatError(`${where}: unknown requirement type ${JSON.stringify(v.type)}`);
  }
}

const SIGSTORE_KEYS = [
  'type',
  'keyPath',
  'keyPaths',
  'keyData',
  'keyDatas',
  'fulcio',
  'pki',
  'rekorPublicKeyPath',
  'rekorPublicKeyPaths',
  'rekorPublicKeyData',
  'rekorPublicKeyDatas',
  'signedIdentity',
] as const;

function sigstoreSigned(v: Json, where: string): Requirement {
  object(v, where, SIGSTORE_KEYS);
  for (const key of ['fulcio', 'pki', 'rekorPublicKeyPath', 'rekorPublicKeyPaths', 'rekorPublicKeyData', 'rekorPublicKeyDatas'])
    if (v[key] !== undefined)
      throw new PolicyFormatError(`${where}: "${key}" (keyless or transparency-log verification) is not supported by Stove; use keyPath, keyPaths, keyData or keyDatas`);
  const given = (['keyPath', 'keyPaths', 'keyData', 'keyDatas'] as const).filter((k) => v[k] !== undefined);
  if (given.length !== 1)
    throw new PolicyFormatError(`${where}: exactly one of keyPath, keyPaths, keyData, keyDatas must be set${given.length ? `, got ${given.join(' and ')}` : ''}`);
  let keys: KeySource[];
  switch (given[0]) {
    case 'keyPath':
      keys = [{ path: keyPath(v.keyPath, `${where}.keyPath`) }];
      break;
    case 'keyPaths':
      keys = stringList(v.keyPaths, `${where}.keyPaths`).map((p, i) => ({ path: keyPath(p, `${where}.keyPaths[${i}]`) }));
      break;
    case 'keyData':
      keys = [{ pem: base64Bytes(v.keyData, `${where}.keyData`).toString('utf8'), label: `${where}.keyData` }];
      break;
    default: {
      if (!Array.isArray(v.keyDatas) || v.keyDatas.length === 0) throw new PolicyFormatError(`${where}.keyDatas must be a non-empty list`);
      keys = v.keyDatas.map((d, i) => ({ pem: base64Bytes(d, `${where}.keyDatas[${i}]`).toString('utf8'), label: `${where}.keyDatas[${i}]` }));
    }
  }
  const signedIdentity = v.signedIdentity === undefined ? { type: 'matchRepoDigestOrExact' as const } : identityRule(v.signedIdentity, `${where}.signedIdentity`);
  return { type: 'sigstoreSigned', keys, signedIdentity };
}

function keyPath(v: unknown, where: string): string {
  const path = string(v, where);
  if (!path.startsWith('/')) throw new PolicyFormatError(`${where} must be an absolute path, got "${path}"`);
  return path;
}

function identityRule(v: unknown, where: string): SignedIdentityRule {
  if (!isObject(v)) throw new PolicyFormatError(`${where} must be a JSON object`);
  switch (v.type) {
    case 'matchExact':
    case 'matchRepoDigestOrExact':
    case 'matchRepository':
      object(v, where, ['type']);
      return { type: v.type };
    case 'exactReference': {
      object(v, where, ['type', 'dockerReference']);
      const ref = string(v.dockerReference, `${where}.dockerReference`);
      const parsed = parseSignedReference(ref);
      if (!parsed || parsed.nameOnly) throw new PolicyFormatError(`${where}.dockerReference "${ref}" must be an image reference with a tag or digest`);
      return { type: 'exactReference', dockerReference: ref };
    }
    case 'exactRepository': {
      object(v, where, ['type', 'dockerRepository']);
      const repo = string(v.dockerRepository, `${where}.dockerRepository`);
      if (!parseSignedReference(repo)) throw new PolicyFormatError(`${where}.dockerRepository "${repo}" is not a repository name`);
      return { type: 'exactRepository', dockerRepository: repo };
    }
    case 'remapIdentity': {
      object(v, where, ['type', 'prefix', 'signedPrefix']);
      const prefix = remapPrefix(v.prefix, `${where}.prefix`);
      const signedPrefix = remapPrefix(v.signedPrefix, `${where}.signedPrefix`);
      return { type: 'remapIdentity', prefix, signedPrefix };
    }
    default:
      throw new PolicyFormatError(`${where}: unknown signedIdentity type ${JSON.stringify(v.type)}`);
  }
}

/** A remapIdentity prefix: a host[:port] or a repository namespace, fully spelled out. */
function remapPrefix(v: unknown, where: string): string {
  const s = string(v, where);
  if (!/^[A-Za-z0-9.-]+(:\d+)?(\/[a-z0-9]+([._-]+[a-z0-9]+)*)*$/.test(s)) throw new PolicyFormatError(`${where} "${s}" must be host[:port] or host[:port]/namespace`);
  return s;
}

/** The scopes to try for a reference, most specific first (without "" and default). */
export function scopesFor(ref: ImageReference): string[] {
  const name = repositoryName(ref);
  const scopes = [ref.digest ? `${name}@${ref.digest}` : `${name}:${ref.tag}`];
  for (let n = name; ; ) {
    scopes.push(n);
    const slash = n.lastIndexOf('/');
    if (slash < 0) break;
    n = n.slice(0, slash);
  }
  let host = ref.domain.replace(/:\d+$/, '');
  if (host.startsWith('[')) return scopes;
  for (let dot = host.indexOf('.'); dot >= 0; dot = host.indexOf('.')) {
    host = host.slice(dot + 1);
    scopes.push(`*.${host}`);
  }
  return scopes;
}

/** The requirements that apply to a reference, and the scope they came from (`default` if none). */
export function requirementsFor(policy: Policy, ref: ImageReference): { scope: string; requirements: Requirement[] } {
  for (const scope of [...scopesFor(ref), '']) {
    const found = policy.docker.get(scope);
    if (found) return { scope: scope === '' ? 'transports.docker ""' : scope, requirements: found };
  }
  return { scope: 'default', requirements: policy.default };
}
