/**
 * What `stove check` reports about registry trust: the host dirs of the certs dirs (and whether each
 * can be used), and the signature policy files (and whether each parses, with its keys readable).
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { messageOf } from '../../common/errors.js';
import { CertsDirs } from './certs.js';
import { parsePolicy, type Policy } from './policy.js';
import { loadKeys } from './enforce.js';

export interface TrustSettings {
  certsDirs: readonly string[];
  signaturePolicy: string;
  signaturePolicyDir: string;
}

export interface TrustInventory {
  lines: string[];
  /** Files that make pulls fail, with why. */
  problems: string[];
  hosts: number;
  policies: number;
}

async function entries(dir: string): Promise<string[]> {
  return readdir(dir).then((names) => names.sort(), () => []);
}

async function describeHost(dir: string, host: string, seen: Set<string>, out: TrustInventory): Promise<void> {
  const path = join(dir, host);
  if (seen.has(host)) {
    out.lines.push(`certs    ${path}: shadowed by an earlier certs dir`);
    return;
  }
  seen.add(host);
  out.hosts++;
  try {
    const tls = await new CertsDirs([dir]).forHost(host);
    if (!tls) return;
    const client = tls.client ? `, client certificate ${tls.client.certFile}` : '';
    out.lines.push(`certs    ${path}: ${tls.ca.length} CA certificate(s)${client}`);
  } catch (err) {
    out.problems.push(`${path}: ${messageOf(err)}`);
  }
}

async function describePolicy(file: string, out: TrustInventory): Promise<void> {
  out.policies++;
  let policy: Policy;
  try {
    policy = parsePolicy(await readFile(file, 'utf8'));
  } catch (err) {
    out.problems.push(`${file}: ${messageOf(err)} (every pull it governs is refused)`);
    return;
  }
  const requirements = [policy.default, ...policy.docker.values()].flat();
  for (const r of requirements) {
    if (r.type !== 'sigstoreSigned') continue;
    try {
      await loadKeys(r.keys);
    } catch (err) {
      out.problems.push(`${file}: ${messageOf(err)}`);
    }
  }
  const types = (list: Policy['default']) => list.map((r) => r.type).join('+');
  out.lines.push(`policy   ${file}: default ${types(policy.default)}, ${policy.docker.size} docker scope(s)`);
}

export async function trustInventory(settings: TrustSettings): Promise<TrustInventory> {
  const out: TrustInventory = { lines: [], problems: [], hosts: 0, policies: 0 };
  const seen = new Set<string>();
  for (const dir of settings.certsDirs) for (const host of await entries(dir)) await describeHost(dir, host, seen, out);
  if (settings.signaturePolicy) await describePolicy(settings.signaturePolicy, out);
  if (settings.signaturePolicyDir)
    for (const name of await entries(settings.signaturePolicyDir))
      if (name.endsWith('.json')) await describePolicy(join(settings.signaturePolicyDir, name), out);
  if (!settings.signaturePolicy && out.policies === 0) out.lines.push('policy   none: every image is accepted (images.signature_policy is empty)');
  return out;
}
