/**
 * The `signedIdentity` rules of containers-policy.json(5): whether the reference a signature names
 * (`critical.identity.docker-reference`) is acceptable for the image being pulled.
 */
import { formatReference, parseReference, repositoryName, type ImageReference } from '../reference.js';

export type SignedIdentityRule =
  | { type: 'matchExact' }
  | { type: 'matchRepoDigestOrExact' }
  | { type: 'matchRepository' }
  | { type: 'exactReference'; dockerReference: string }
  | { type: 'exactRepository'; dockerRepository: string }
  | { type: 'remapIdentity'; prefix: string; signedPrefix: string };

/** A parsed reference that remembers whether it had neither tag nor digest. */
export interface SignedReference {
  name: string;
  /** `name[:tag][@digest]` as written, normalised. */
  full: string;
  nameOnly: boolean;
  tagged: boolean;
}

/** Parses a reference as distribution's ParseNormalizedNamed does, or undefined if it is not one. */
export function parseSignedReference(s: string): SignedReference | undefined {
  let ref: ImageReference;
  try {
    ref = parseReference(s);
  } catch {
    return undefined;
  }
  if (s.trim() !== s) return undefined;
  const last = s.slice(s.lastIndexOf('/') + 1);
  const hasDigest = s.includes('@');
  const hasTag = last.split('@')[0]!.includes(':');
  const nameOnly = !hasDigest && !hasTag;
  const name = repositoryName(ref);
  const full = nameOnly ? name : formatReference({ ...ref, tag: hasTag ? ref.tag : undefined });
  return { name, full, nameOnly, tagged: hasTag };
}

/** The pulled image as a SignedReference (its tag defaults to latest when it had neither). */
function intendedOf(ref: ImageReference): SignedReference {
  return { name: repositoryName(ref), full: formatReference(ref), nameOnly: false, tagged: !!ref.tag };
}

/** A tagged image needs the same reference; one pulled by digest, the same repository. */
function repoDigestOrExact(intended: SignedReference, signed: SignedReference): boolean {
  if (signed.nameOnly) return false;
  if (intended.tagged) return signed.full === intended.full;
  return signed.name === intended.name;
}

/** Whether a signature's identity satisfies the rule for the pulled reference. */
export function identityMatches(rule: SignedIdentityRule, pulled: ImageReference, signedText: string): boolean {
  const signed = parseSignedReference(signedText);
  if (!signed) return false;
  const intended = intendedOf(pulled);
  switch (rule.type) {
    case 'matchExact':
      return !signed.nameOnly && signed.full === intended.full;
    case 'matchRepoDigestOrExact':
      return repoDigestOrExact(intended, signed);
    case 'matchRepository':
      return signed.name === intended.name;
    case 'exactReference': {
      const want = parseSignedReference(rule.dockerReference);
      return !!want && !want.nameOnly && !signed.nameOnly && signed.full === want.full;
    }
    case 'exactRepository':
      return signed.name === parseSignedReference(rule.dockerRepository)?.name;
    case 'remapIdentity': {
      const name = intended.name;
      const matches = name === rule.prefix || name.startsWith(rule.prefix + '/');
      if (!matches) return repoDigestOrExact(intended, signed);
      const remapped = parseSignedReference(rule.signedPrefix + intended.full.slice(rule.prefix.length));
      return !!remapped && repoDigestOrExact({ ...remapped, tagged: intended.tagged }, signed);
    }
  }
}
