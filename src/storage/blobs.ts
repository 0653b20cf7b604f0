/**
 * The content store: blobs (layers, configs, manifests) addressed by digest under
 * `<images>/blobs/<algorithm>/<hex>`, shared by every image. Writers put bytes in `<images>/ingest/`
 * and rename them into place only once the digest was verified, so a stored blob is always whole.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, stat, unlink, writeFile, open } from 'node:fs/promises';
import { join } from 'node:path';
import { internal } from '../common/errors.js';

/** Digest of bytes in memory with the digest's own algorithm (`sha256:…` or `sha512:…`). */
export function digestOf(data: Uint8Array, algorithm = 'sha256'): string {
  return `${algorithm}:${createHash(algorithm).update(data).digest('hex')}`;
}

/** The algorithm part of a digest. */
export function digestAlgorithm(digest: string): 'sha256' | 'sha512' {
  const algorithm = digest.slice(0, digest.indexOf(':'));
  if (algorithm !== 'sha256' && algorithm !== 'sha512') throw internal(`unsupported digest algorithm in "${digest}"`);
  return algorithm;
}

export class BlobStore {
  readonly blobsDir: string;
  readonly ingestDir: string;

  constructor(imagesDir: string) {
    this.blobsDir = join(imagesDir, 'blobs');
    this.ingestDir = join(imagesDir, 'ingest');
  }

  /** Creates the dirs and drops leftovers of interrupted writes. */
  async init(): Promise<void> {
    await rm(this.ingestDir, { recursive: true, force: true });
    await mkdir(join(this.blobsDir, 'sha256'), { recursive: true, mode: 0o700 });
    await mkdir(join(this.blobsDir, 'sha512'), { recursive: true, mode: 0o700 });
    await mkdir(this.ingestDir, { recursive: true, mode: 0o700 });
  }

  path(digest: string): string {
    const algorithm = digestAlgorithm(digest);
    return join(this.blobsDir, algorithm, digest.slice(algorithm.length + 1));
  }

  /** A fresh name for an in-progress write. */
  ingestPath(digest: string): string {
    return join(this.ingestDir, `${digest.replace(':', '-').slice(0, 24)}-${randomBytes(6).toString('hex')}`);
  }

  async has(digest: string): Promise<boolean> {
    try {
      await stat(this.path(digest));
      return true;
    } catch {
      return false;
    }
  }

  async size(digest: string): Promise<number> {
    return (await stat(this.path(digest))).size;
  }

  /** Moves a verified ingest file into place. */
  async commit(ingestPath: string, digest: string): Promise<void> {
    await rename(ingestPath, this.path(digest));
  }

  /** Stores small content held in memory after checking it against its digest. */
  async put(digest: string, data: Uint8Array): Promise<void> {
    const actual = digestOf(data, digestAlgorithm(digest));
    if (actual !== digest) throw internal(`content digest mismatch: expected ${digest}, got ${actual}`);
    if (await this.has(digest)) return;
    const tmp = this.ingestPath(digest);
    try {
      await writeFile(tmp, data, { mode: 0o600 });
      const fh = await open(tmp, 'r');
      try {
        await fh.datasync();
      } finally {
        await fh.close();
      }
      await this.commit(tmp, digest);
    } catch (err) {
      await unlink(tmp).catch(() => {});
      throw err;
    }
  }

  async read(digest: string): Promise<Buffer> {
    return readFile(this.path(digest));
  }

  async remove(digest: string): Promise<void> {
    await unlink(this.path(digest)).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
  }

  /** Every stored digest. */
  async list(): Promise<string[]> {
    const out: string[] = [];
    for (const algorithm of ['sha256', 'sha512']) {
      for (const hex of await readdir(join(this.blobsDir, algorithm)).catch(() => [] as string[])) out.push(`${algorithm}:${hex}`);
    }
    return out;
  }
}
