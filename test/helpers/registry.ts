/**
 * A real OCI distribution registry for tests: Debian's `docker-registry` (CNCF distribution 2.8) on a
 * free 127.0.0.1 port, storage in a temp dir, optionally behind htpasswd basic auth. `stop()` kills it
 * and removes every file it wrote. Nothing outside loopback is ever contacted.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile, mkdir, readFile, open } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Agent, request, type Dispatcher } from 'undici';
import { stopChild, waitUntilServing } from './child.js';

export const REGISTRY_BIN = process.env.REGISTRY_BIN ?? '/usr/bin/docker-registry';

export interface RegistryCredentials {
  username: string;
  password: string;
}

export interface TestRegistry {
  /** `127.0.0.1:<port>`: the host part of image references, e.g. `${host}/test/busybox:latest`. */
  readonly host: string;
  readonly port: number;
  /** `http://127.0.0.1:<port>` (`https://` with `tls`). */
  readonly url: string;
  /** What the test's own requests go through (trusts the registry's CA, presents its client pair). */
  readonly dispatcher?: Dispatcher;
  /** Temp dir holding config, htpasswd and storage. */
  readonly dir: string;
  /** Set when the registry requires basic auth. */
  readonly credentials?: RegistryCredentials;
  /** `Authorization` header value for the registry's own credentials (undefined without auth). */
  authorization(): string | undefined;
  /** The file on disk that holds a blob's bytes (for tests that tamper with stored content). */
  blobDataPath(digest: string): string;
  /** Flips one byte in a stored blob, keeping its size: the registry then serves corrupt content. */
  tamperBlob(digest: string, offset?: number): Promise<void>;
  /** Everything the registry logged so far. */
  output(): string;
  /** Kills the registry and removes its dir. Safe to call twice. */
  stop(): Promise<void>;
}

export interface RegistryOptions {
  /** Require HTTP basic auth with these credentials (htpasswd, bcrypt). */
  auth?: RegistryCredentials;
  /** Serve https with this certificate; with `clientCaFile`, require client certificates it signed. */
  tls?: RegistryTls;
}

export interface RegistryTls {
  certFile: string;
  keyFile: string;
  /** The CA that signed certFile (PEM), for the tests' own requests. */
  ca: string;
  clientCaFile?: string;
  /** The client pair the tests' own requests present (PEM). */
  client?: { cert: string; key: string };
}

/** A port that was free a moment ago on 127.0.0.1. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** A bcrypt htpasswd line, made by libcrypt through perl (perl-base is essential on Debian). */
function htpasswdLine({ username, password }: RegistryCredentials): string {
  const alphabet = './ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  const salt = Array.from(randomBytes(22), (b) => alphabet[b % 64]).join('');
  // The salt's last char only carries 2 bits: libxcrypt wants it from [.Oeu].
  const setting = `$2b$10$${salt.slice(0, 21)}${'.Oeu'[salt.charCodeAt(21) % 4]}`;
  const hash = execFileSync('perl', ['-e', 'print crypt($ARGV[0], $ARGV[1])', password, setting], { encoding: 'utf8' });
  if (!hash.startsWith('$2b$')) throw new Error(`libcrypt has no bcrypt: got "${hash}"`);
  return `${username}:${hash}\n`;
}

function configYaml(dir: string, host: string, auth: boolean, tls: RegistryTls | undefined): string {
  return `version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: ${join(dir, 'storage')}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: ${host}
${
  tls
    ? `  tls:
    certificate: ${tls.certFile}
    key: ${tls.keyFile}
${tls.clientCaFile ? `    clientcas:
      - ${tls.clientCaFile}
` : ''}`
    : ''
}${
  auth
    ? `auth:
  htpasswd:
    realm: stove-test
    path: ${join(dir, 'htpasswd')}
`
    : ''
}`;
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

function waitReady(url: string, child: ChildProcess, output: () => string, dispatcher: Dispatcher | undefined): Promise<void> {
  return waitUntilServing(`docker-registry on ${url}`, child, output, async () => {
    const res = await request(`${url}/v2/`, { headersTimeout: 1000, bodyTimeout: 1000, dispatcher });
    await res.body.dump();
    return res.statusCode === 200 || res.statusCode === 401;
  }, 15_000);
}

async function startOnce(options: RegistryOptions): Promise<TestRegistry> {
  const dir = await mkdtemp(join(tmpdir(), 'stove-registry-'));
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const url = `${options.tls ? 'https' : 'http'}://${host}`;
  const dispatcher = options.tls
    ? new Agent({ connect: { ca: options.tls.ca, cert: options.tls.client?.cert, key: options.tls.client?.key } })
    : undefined;
  await mkdir(join(dir, 'storage'));
  if (options.auth) await writeFile(join(dir, 'htpasswd'), htpasswdLine(options.auth));
  await writeFile(join(dir, 'config.yml'), configYaml(dir, host, !!options.auth, options.tls));

  const child = spawn(REGISTRY_BIN, ['serve', join(dir, 'config.yml')], { stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  child.once('exit', () => live.delete(child));

  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await stopChild(child);
    await dispatcher?.close().catch(() => {});
    await rm(dir, { recursive: true, force: true });
  };

  try {
    await waitReady(url, child, () => out, dispatcher);
  } catch (err) {
    await stop();
    throw err;
  }

  const blobDataPath = (digest: string) => {
    const [algo, hex] = digest.split(':') as [string, string];
    return join(dir, 'storage/docker/registry/v2/blobs', algo, hex.slice(0, 2), hex, 'data');
  };
  return {
    host,
    port,
    url,
    dispatcher,
    dir,
    credentials: options.auth,
    authorization: () =>
      options.auth ? 'Basic ' + Buffer.from(`${options.auth.username}:${options.auth.password}`).toString('base64') : undefined,
    blobDataPath,
    async tamperBlob(digest, offset) {
      const path = blobDataPath(digest);
      const size = (await readFile(path)).length;
      const at = offset ?? Math.floor(size / 2);
      const fh = await open(path, 'r+');
      try {
        const b = Buffer.alloc(1);
        await fh.read(b, 0, 1, at);
        b[0] = b[0]! ^ 0xff;
        await fh.write(b, 0, 1, at);
      } finally {
        await fh.close();
      }
    },
    output: () => out,
    stop,
  };
}

/** Starts a registry on a free loopback port (retrying if another process grabs the port first). */
export async function startRegistry(options: RegistryOptions = {}): Promise<TestRegistry> {
  let lastError: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      return await startOnce(options);
    } catch (err) {
      lastError = err;
    }
  }
  throw lastError;
}
