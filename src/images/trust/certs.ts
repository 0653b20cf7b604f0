/**
 * Per-registry TLS material from certs dirs in Docker's layout, which containers/image and containerd
 * read too: `<dir>/<host[:port]>/*.crt` are extra CA certificates, `*.cert` + `*.key` (same base
 * name) a client certificate pair. The first dir (in config order) that has a dir for the host wins.
 * Each lookup stats the host dir and its files; contents are read again only when a name, size or
 * mtime changed, so files dropped in while the daemon runs apply to the next pull.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { X509Certificate } from 'node:crypto';
import { createSecureContext } from 'node:tls';
import { failedPrecondition, messageOf } from '../../common/errors.js';

/** A certs file larger than this is refused (a CA bundle is a few hundred KiB at most). */
const MAX_CERT_FILE_BYTES = 1 << 20;

/** What to present and trust when talking TLS to one host. */
export interface HostTls {
  /** The host dir the material came from. */
  dir: string;
  /** PEM CA certificates, trusted in addition to the built-in roots. */
  ca: string[];
  caFiles: string[];
  /** The client certificate pair, if the dir has one. */
  client?: { cert: string; key: string; certFile: string };
  /** Changes whenever a file in the dir changes: agents are keyed by it. */
  fingerprint: string;
}

interface Cached {
  fingerprint: string;
  tls: HostTls;
}

/** A host as it names a dir: `name[:port]`, never a path. */
function safeHostDirName(host: string): boolean {
  return host !== '' && host !== '.' && host !== '..' && !host.includes('/') && !host.includes('\0');
}

export class CertsDirs {
  private readonly cache = new Map<string, Cached>();

  constructor(private dirs: readonly string[]) {}

  /** Replaces the dirs (a config reload); the next lookup reads them. */
  setDirs(dirs: readonly string[]): void {
    this.dirs = [...dirs];
    this.cache.clear();
  }

  /** Where an operator should put a host's CA: the first certs dir. */
  caHint(host: string): string {
    return this.dirs.length ? join(this.dirs[0]!, host, 'ca.crt') : `<certs dir>/${host}/ca.crt (images.certs_dirs is empty)`;
  }

  /** Where an operator should put a host's client pair. */
  clientHint(host: string): string {
    const base = this.dirs.length ? join(this.dirs[0]!, host) : `<certs dir>/${host}`;
    return `${base}/client.cert and ${base}/client.key`;
  }

  /** The TLS material for a host, or undefined when no certs dir has a dir for it. */
  async forHost(host: string): Promise<HostTls | undefined> {
    if (!safeHostDirName(host)) return undefined;
    for (const root of this.dirs) {
      const dir = join(root, host);
      const listing = await listDir(dir);
      if (!listing) continue;
      const fingerprint = listing.map((f) => `${f.name}:${f.size}:${f.mtimeMs}`).join('|');
      const cached = this.cache.get(dir);
      if (cached?.fingerprint === fingerprint) return cached.tls;
      const tls = await readHostDir(dir, listing.map((f) => f.name), `${dir}|${fingerprint}`);
      this.cache.set(dir, { fingerprint, tls });
      return tls;
    }
    return undefined;
  }
}

/** The dir's regular files with their sizes and mtimes, or undefined when it is absent. */
async function listDir(dir: string): Promise<{ name: string; size: number; mtimeMs: number }[] | undefined> {
  let names: string[];
  try {
    if (!(await stat(dir)).isDirectory()) return undefined;
    names = (await readdir(dir)).sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return undefined;
    throw failedPrecondition(`reading certs dir ${dir}: ${messageOf(err)}`, err);
  }
  const out: { name: string; size: number; mtimeMs: number }[] = [];
  for (const name of names) {
    if (!/\.(crt|cert|key)$/.test(name)) continue;
    const st = await stat(join(dir, name)).catch(() => undefined);
    if (st?.isFile()) out.push({ name, size: st.size, mtimeMs: st.mtimeMs });
  }
  return out;
}

async function readPem(path: string): Promise<string> {
  const st = await stat(path);
  if (st.size > MAX_CERT_FILE_BYTES) throw failedPrecondition(`${path} is larger than ${MAX_CERT_FILE_BYTES} bytes`);
  return readFile(path, 'utf8');
}

/** Reads and checks a host dir: CAs parse, each `.cert` has its `.key` and they belong together. */
async function readHostDir(dir: string, names: string[], fingerprint: string): Promise<HostTls> {
  const tls: HostTls = { dir, ca: [], caFiles: [], fingerprint };
  for (const name of names.filter((n) => n.endsWith('.crt'))) {
    const path = join(dir, name);
    const pem = await readPem(path);
    const certs = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
    if (certs.length === 0) throw failedPrecondition(`CA file ${path} holds no PEM certificate`);
    for (const cert of certs) {
      try {
        new X509Certificate(cert);
      } catch (err) {
        throw failedPrecondition(`CA file ${path}: not a valid certificate: ${messageOf(err)}`, err);
      }
      tls.ca.push(cert);
    }
    tls.caFiles.push(path);
  }
  for (const name of names.filter((n) => n.endsWith('.key'))) {
    const base = name.slice(0, -'.key'.length);
    if (!names.includes(`${base}.cert`))
      throw failedPrecondition(`missing client certificate ${join(dir, base + '.cert')} for key ${join(dir, name)}`);
  }
  const certNames = names.filter((n) => n.endsWith('.cert'));
  for (const name of certNames) {
    const base = name.slice(0, -'.cert'.length);
    if (!names.includes(`${base}.key`))
      throw failedPrecondition(
        `missing key ${join(dir, base + '.key')} for client certificate ${join(dir, name)}; CA certificates must use the extension .crt`,
      );
  }
  // Docker and containers/image present the first pair (sorted by name); so does Stove.
  const first = certNames[0];
  if (first) {
    const certFile = join(dir, first);
    const keyFile = join(dir, first.slice(0, -'.cert'.length) + '.key');
    const cert = await readPem(certFile);
    const key = await readPem(keyFile);
    try {
      createSecureContext({ cert, key });
    } catch (err) {
      throw failedPrecondition(`client certificate ${certFile} with key ${keyFile}: ${messageOf(err)}`, err);
    }
    tls.client = { cert, key, certFile };
  }
  return tls;
}
