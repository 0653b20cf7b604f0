/**
 * Test certificates made with openssl in a temp dir: a CA, server certificates for 127.0.0.1 and
 * client certificates, each as PEM files. Nothing is trusted outside the tests that use them.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface KeyPair {
  certFile: string;
  keyFile: string;
  cert: string;
  key: string;
}

export interface TestCa extends KeyPair {
  /** Signs a server certificate for an IP or DNS name. */
  server(name: string): Promise<KeyPair>;
  /** Signs a client certificate. */
  client(commonName: string): Promise<KeyPair>;
}

export interface TestPki {
  dir: string;
  newCa(name: string): Promise<TestCa>;
  cleanup(): Promise<void>;
}

function openssl(args: string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

async function pair(dir: string, base: string): Promise<KeyPair> {
  const certFile = join(dir, `${base}.crt`);
  const keyFile = join(dir, `${base}.key`);
  return { certFile, keyFile, cert: await readFile(certFile, 'utf8'), key: await readFile(keyFile, 'utf8') };
}

/** A temp dir to make CAs in; `cleanup()` removes every file. */
export async function testPki(): Promise<TestPki> {
  const dir = await mkdtemp(join(tmpdir(), 'stove-pki-'));
  let serial = 0;
  const newKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];

  const sign = async (ca: string, base: string, subject: string, extensions: string): Promise<KeyPair> => {
    const ext = join(dir, `${base}.ext`);
    await writeFile(ext, extensions);
    openssl(['req', ...newKey, '-keyout', `${base}.key`, '-out', `${base}.csr`, '-subj', subject], dir);
    openssl(
      ['x509', '-req', '-in', `${base}.csr`, '-CA', `${ca}.crt`, '-CAkey', `${ca}.key`, '-set_serial', String(++serial + 1000), '-days', '2', '-out', `${base}.crt`, '-extfile', ext],
      dir,
    );
    return pair(dir, base);
  };

  return {
    dir,
    async newCa(name) {
      openssl(['req', '-x509', ...newKey, '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '2', '-subj', `/CN=${name}`], dir);
      const ca = await pair(dir, name);
      return {
        ...ca,
        server: (host) => {
          const san = /^[\d.]+$/.test(host) ? `IP:${host}` : `DNS:${host}`;
          return sign(name, `${name}-server-${++serial}`, `/CN=${host}`, `subjectAltName=${san}\nextendedKeyUsage=serverAuth\n`);
        },
        client: (cn) => sign(name, `${name}-client-${++serial}`, `/CN=${cn}`, `extendedKeyUsage=clientAuth\n`),
      };
    },
    cleanup: () => rm(dir, { recursive: true, force: true }),
  };
}
