/**
 * Enforcing the signature policy on a pull: which policy file applies (the pod namespace's, else the
 * node's), reloaded when its mtime changes; which scope's requirements apply to the reference; and
 * whether the manifest digest being pulled satisfies every one of them. A refusal names the policy
 * file, the scope and the reason.
 */
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { StoveError, failedPrecondition, invalidArgument, messageOf, wrap } from '../../common/errors.js';
import type { Logger } from '../../common/logger.js';
import { formatReference, type ImageReference } from '../reference.js';
import { PolicyFormatError, parsePolicy, requirementsFor, type KeySource, type Policy, type Requirement } from './policy.js';
import { identityMatches } from './identity.js';
import { fetchSignatures, loadPublicKey, parsePayload, signingKey, type SignatureSource, type TrustedKey } from './cosign.js';

const MAX_POLICY_BYTES = 1 << 20;
const MAX_KEY_BYTES = 64 << 10;
const NAMESPACE_RE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/** A pull the policy refused. */
export class PolicyRefusal extends StoveError {
  constructor(message: string) {
    super('FailedPrecondition', message);
  }
}

/** What one pull must satisfy: the file it came from, the scope, the requirements. */
export interface PullPolicy {
  file: string;
  scope: string;
  requirements: Requirement[];
}

interface Loaded {
  stamp: string;
  policy?: Policy;
  error?: string;
}

export interface PolicyStoreOptions {
  /** The node's policy file; empty: accept every image. */
  policyFile: string;
  /** Per-namespace policy files `<dir>/<namespace>.json`; empty: none. */
  policyDir: string;
  log: Logger;
}

/** Policy files, parsed once per change of mtime, size or inode. */
export class PolicyStore {
  private readonly cache = new Map<string, Loaded>();

  constructor(private options: PolicyStoreOptions) {}

  /** Points at other files (a config reload); each is read when a pull first needs it. */
  setFiles(policyFile: string, policyDir: string): void {
    this.options = { ...this.options, policyFile, policyDir };
  }

  /** The policy file for a pull: the namespace's when it has one, else the node's (or none). */
  private async fileFor(namespace: string | undefined): Promise<string | undefined> {
    if (namespace && this.options.policyDir) {
      if (!NAMESPACE_RE.test(namespace)) throw invalidArgument(`invalid pod namespace "${namespace}" for a per-namespace signature policy`);
      const path = join(this.options.policyDir, `${namespace}.json`);
      if (await stat(path).then(() => true, () => false)) return path;
    }
    return this.options.policyFile || undefined;
  }

  /** The requirements for a reference, or undefined when no policy is configured. */
  async forPull(ref: ImageReference, namespace?: string): Promise<PullPolicy | undefined> {
    const file = await this.fileFor(namespace);
    if (!file) return undefined;
    const policy = await this.load(file);
    return { file, ...requirementsFor(policy, ref) };
  }

  private async load(file: string): Promise<Policy> {
    let stamp: string;
    try {
      const st = await stat(file);
      stamp = `${st.ino}:${st.size}:${st.mtimeMs}`;
    } catch (err) {
      throw failedPrecondition(`signature policy ${file} cannot be read (${messageOf(err)}); pulls are refused until it can`);
    }
    let loaded = this.cache.get(file);
    if (loaded?.stamp !== stamp) {
      loaded = await this.parse(file, stamp);
      this.cache.set(file, loaded);
      if (loaded.error) this.options.log.error('signature policy is not valid, refusing pulls', { file, error: loaded.error });
      else this.options.log.info('signature policy loaded', { file });
    }
    if (!loaded.policy) throw failedPrecondition(`signature policy ${file} is not valid: ${loaded.error}; pulls are refused until it is fixed`);
    return loaded.policy;
  }

  private async parse(file: string, stamp: string): Promise<Loaded> {
    try {
      const st = await stat(file);
      if (st.size > MAX_POLICY_BYTES) return { stamp, error: `larger than ${MAX_POLICY_BYTES} bytes` };
      return { stamp, policy: parsePolicy(await readFile(file, 'utf8')) };
    } catch (err) {
      if (err instanceof PolicyFormatError) return { stamp, error: err.message };
      return { stamp, error: messageOf(err) };
    }
  }
}

/** Refuses at once what needs no registry: a `reject` requirement. */
export function refuseRejected(policy: PullPolicy, ref: ImageReference): void {
  if (policy.requirements.some((r) => r.type === 'reject'))
    throw refusal(policy, ref, 'the policy rejects every image in this scope');
}

/** True when the policy needs signatures from the registry. */
export function needsSignatures(policy: PullPolicy): boolean {
  return policy.requirements.some((r) => r.type === 'sigstoreSigned');
}

function refusal(policy: PullPolicy, ref: ImageReference, reason: string): PolicyRefusal {
  return new PolicyRefusal(`image "${formatReference(ref)}" refused by signature policy ${policy.file} (scope "${policy.scope}"): ${reason}`);
}

/** Reads and checks the public keys a requirement names. */
export async function loadKeys(sources: KeySource[]): Promise<TrustedKey[]> {
  const keys: TrustedKey[] = [];
  for (const source of sources) {
    if ('pem' in source) {
      keys.push(loadPublicKey(source.pem, source.label));
      continue;
    }
    let pem: string;
    try {
      const st = await stat(source.path);
      if (st.size > MAX_KEY_BYTES) throw new Error(`larger than ${MAX_KEY_BYTES} bytes`);
      pem = await readFile(source.path, 'utf8');
    } catch (err) {
      throw failedPrecondition(`public key ${source.path} named by the signature policy cannot be read: ${messageOf(err)}`);
    }
    keys.push(loadPublicKey(pem, source.path));
  }
  return keys;
}

/**
 * Checks every requirement for the manifest digest being pulled (the top-level one: an index's
 * digest for a multi-platform image, as cosign signs it). Throws a PolicyRefusal with the reason.
 */
export async function enforce(policy: PullPolicy, ref: ImageReference, manifestDigest: string, source: SignatureSource): Promise<{ signedBy: string[] }> {
  refuseRejected(policy, ref);
  const signedBy: string[] = [];
  let fetched: Awaited<ReturnType<typeof fetchSignatures>> | undefined;
  for (const requirement of policy.requirements) {
    if (requirement.type !== 'sigstoreSigned') continue;
    let keys: TrustedKey[];
    try {
      keys = await loadKeys(requirement.keys);
    } catch (err) {
      throw refusal(policy, ref, messageOf(err));
    }
    // A registry that fails to answer keeps its error's kind (a retry may help); what it sends is judged below.
    fetched ??= await fetchSignatures(source, manifestDigest).catch((err: unknown) => {
      throw wrap(err, `reading the signatures of "${formatReference(ref)}" for signature policy ${policy.file} (scope "${policy.scope}")`);
    });
    const reasons: string[] = [];
    let accepted: string | undefined;
    for (const signature of fetched.signatures) {
      const verdict = checkSignature(signature, keys, requirement, ref, manifestDigest);
      if (verdict.accepted) {
        accepted = verdict.accepted;
        break;
      }
      reasons.push(verdict.reason!);
    }
    if (accepted) {
      signedBy.push(accepted);
      continue;
    }
    if (reasons.length === 0) {
      const others = fetched.otherAttachments ? ` (${fetched.otherAttachments} attachments that are not signatures)` : '';
      throw refusal(policy, ref, `no signature for ${manifestDigest}${others}`);
    }
    throw refusal(policy, ref, [...new Set(reasons)].join('; '));
  }
  return { signedBy };
}

/** The key a signature verified with, when it satisfies the requirement; else why it does not. */
function checkSignature(
  signature: Parameters<typeof signingKey>[0],
  keys: TrustedKey[],
  requirement: Extract<Requirement, { type: 'sigstoreSigned' }>,
  ref: ImageReference,
  manifestDigest: string,
): { accepted: string; reason?: undefined } | { accepted?: undefined; reason: string } {
  if (signature.base64Signature === undefined) return { reason: 'a signature layer without its signature annotation' };
  const key = signingKey(signature, keys);
  if (!key) return { reason: `signature by an unknown key (trusted: ${keys.map((k) => k.label).join(', ')})` };
  let payload;
  try {
    payload = parsePayload(signature.payload);
  } catch (err) {
    return { reason: `invalid signature payload: ${messageOf(err)}` };
  }
  if (payload.dockerManifestDigest !== manifestDigest) return { reason: `signature for another digest (${payload.dockerManifestDigest})` };
  if (!identityMatches(requirement.signedIdentity, ref, payload.dockerReference))
    return {
      reason: `identity mismatch: signed for "${payload.dockerReference}", which ${requirement.signedIdentity.type} does not accept for "${formatReference(ref)}"`,
    };
  return { accepted: key.label };
}
