/**
 * The unpack worker thread. For one layer at a time it takes the raw blob bytes (posted by the main
 * thread as they arrive from the registry, or read from a stored blob), and in one pass:
 * hashes them (the blob digest), writes them to the content store's temp file, decompresses them
 * (gzip or zstd, by magic number), hashes the tar (the diff ID) and extracts it with LayerExtractor.
 * All file-system calls here are synchronous: that is what makes extraction fast, and it is why this
 * runs off the main thread.
 */
import { parentPort } from 'node:worker_threads';
import { createHash, type Hash } from 'node:crypto';
import { closeSync, fdatasyncSync, openSync, readSync, statfsSync, writeSync } from 'node:fs';
import { createGunzip, createZstdDecompress, type Gunzip, type ZstdDecompress } from 'node:zlib';
import { LayerExtractor, UnsafeEntryError } from './extract.js';
import { mknodFromWorker } from './mknod-bridge.js';
import { TarFormatError, TarReader } from './tar-reader.js';
import type { WorkerRequest, WorkerReply, UnpackJob } from './unpack-protocol.js';

const port = parentPort!;
const ZLIB_CHUNK = 256 * 1024;
const READ_CHUNK = 1024 * 1024;
/** Free space is checked again after every this many bytes of tar. */
const SPACE_CHECK_BYTES = 8 * 1024 * 1024;

/** A layer over a configured cap, or a filesystem running out of room: the caller frees what was written. */
class CapError extends Error {
  constructor(
    message: string,
    readonly reason: 'too-large' | 'no-space',
  ) {
    super(message);
  }
}

/** Bytes available to unprivileged writers on the filesystem holding `path`. */
function freeBytes(path: string): number {
  const st = statfsSync(path);
  return st.bavail * st.bsize;
}

function post(reply: WorkerReply): void {
  port.postMessage(reply);
}

class JobRun {
  private readonly digest: Hash;
  private readonly diff?: Hash;
  private size = 0;
  private tarBytes = 0;
  private nextSpaceCheck = 0;
  private blobFd = -1;
  private reader?: TarReader;
  private extractor?: LayerExtractor;
  private decompressor?: Gunzip | ZstdDecompress;
  private head: Buffer[] = [];
  private headLength = 0;
  private passthrough = false;
  private failed = false;
  private ended = false;
  /** A decoding error: extraction stops, hashing goes on so a corrupt download reads as a digest mismatch. */
  private decodeError?: string;

  constructor(private readonly job: UnpackJob) {
    this.digest = createHash(job.digestAlgorithm);
    if (job.blobPath) this.blobFd = openSync(job.blobPath, 'wx', 0o644);
    if (job.unpackDir) {
      this.diff = createHash('sha256');
      this.extractor = new LayerExtractor(job.unpackDir, {
        whiteoutTemplate: job.whiteoutTemplate,
        policy: job.policy,
        mknod: (path, node) => mknodFromWorker(port, path, node),
      });
      this.reader = new TarReader(this.extractor);
    }
  }

  /** Raw blob bytes; `done` runs once they are consumed (for flow control). */
  write(chunk: Buffer, done: () => void): void {
    if (this.failed) return done();
    try {
      this.digest.update(chunk);
      this.size += chunk.length;
      if (this.blobFd >= 0) {
        let offset = 0;
        while (offset < chunk.length) offset += writeSync(this.blobFd, chunk, offset, chunk.length - offset);
      }
      if (!this.reader || this.decodeError) return done();
      if (this.passthrough) {
        this.onTar(chunk, false);
        return done();
      }
      if (this.decompressor) {
        this.decompressor.write(chunk, () => done());
        return;
      }
      // Sniff the format from the first bytes: registries and tools do not always label it right.
      this.head.push(chunk);
      this.headLength += chunk.length;
      if (this.headLength < 4) return done();
      this.startDecoding(Buffer.concat(this.head), done);
      this.head = [];
    } catch (err) {
      this.fail(err);
      done();
    }
  }

  private startDecoding(first: Buffer, done: () => void): void {
    if (first[0] === 0x1f && first[1] === 0x8b) this.decompressor = createGunzip({ chunkSize: ZLIB_CHUNK });
    else if (first.readUInt32LE(0) === 0xfd2fb528) this.decompressor = createZstdDecompress({ chunkSize: ZLIB_CHUNK });
    if (!this.decompressor) {
      // An uncompressed tar: its diff ID is the blob digest when both are sha256 (hash once).
      this.passthrough = true;
      this.onTar(first, this.job.digestAlgorithm !== 'sha256');
      return done();
    }
    this.decompressor.on('data', (d: Buffer) => this.onTar(d));
    this.decompressor.on('error', (err) => this.stopDecoding(`decompressing layer: ${err.message}`));
    this.decompressor.write(first, () => done());
  }

  private onTar(chunk: Buffer, hash = true): void {
    if (this.failed || this.decodeError) return;
    try {
      this.checkCaps(chunk.length);
      if (hash || this.job.digestAlgorithm !== 'sha256') this.diff!.update(chunk);
      this.reader!.push(chunk);
    } catch (err) {
      if (err instanceof TarFormatError) this.stopDecoding(err.message);
      else this.fail(err);
    }
  }

  /** Counts `n` more tar bytes against the layer cap; checks free space every SPACE_CHECK_BYTES. */
  private checkCaps(n: number): void {
    this.tarBytes += n;
    const { maxTarBytes, minFreeBytes, unpackDir } = this.job;
    if (maxTarBytes !== undefined && this.tarBytes > maxTarBytes)
      throw new CapError(`layer is larger than ${maxTarBytes} bytes uncompressed (images.max_layer_size)`, 'too-large');
    if (minFreeBytes !== undefined && unpackDir && this.tarBytes >= this.nextSpaceCheck) {
      this.nextSpaceCheck = this.tarBytes + SPACE_CHECK_BYTES;
      const free = freeBytes(unpackDir);
      if (free < minFreeBytes)
        throw new CapError(`only ${free} bytes left free on the image filesystem, less than images.min_free_space (${minFreeBytes})`, 'no-space');
    }
  }

  /** Stops decompressing and extracting after a format error, but keeps hashing the input. */
  private stopDecoding(message: string): void {
    if (this.decodeError || this.failed) return;
    this.decodeError = message;
    const d = this.decompressor;
    if (d) {
      d.removeAllListeners('data');
      d.on('error', () => {});
      d.destroy();
      this.decompressor = undefined;
    }
    this.extractor?.abort();
    this.passthrough = false;
  }

  /** All input given: finish decoding, check the archive ended cleanly, report. */
  end(): void {
    if (this.failed || this.ended) return;
    this.ended = true;
    const finish = () => {
      if (this.failed) return;
      try {
        if (this.reader && !this.decodeError) {
          if (!this.decompressor && !this.passthrough && this.headLength > 0) this.onTar(Buffer.concat(this.head));
          if (this.failed) return;
          try {
            this.reader.end();
            this.extractor!.finish();
          } catch (err) {
            if (!(err instanceof TarFormatError)) throw err;
            this.decodeError = err.message;
          }
        }
        if (this.blobFd >= 0) {
          if (this.job.sync) fdatasyncSync(this.blobFd);
          closeSync(this.blobFd);
          this.blobFd = -1;
        }
        const digest = `${this.job.digestAlgorithm}:${this.digest.digest('hex')}`;
        const sameHash = this.passthrough && this.job.digestAlgorithm === 'sha256';
        post({
          type: 'done',
          result: {
            digest,
            size: this.size,
            diffId: this.diff ? (sameHash ? digest : `sha256:${this.diff.digest('hex')}`) : undefined,
            usage: this.extractor?.usage,
            tarBytes: this.reader ? this.tarBytes : undefined,
            decodeError: this.decodeError,
          },
        });
      } catch (err) {
        this.fail(err);
      }
    };
    if (this.decompressor && !this.decodeError) {
      const d = this.decompressor;
      d.once('end', finish);
      d.once('close', () => {
        if (this.decodeError) finish();
      });
      d.end();
    } else {
      finish();
    }
  }

  fail(err: unknown): void {
    if (this.failed) return;
    this.failed = true;
    this.release();
    const reason =
      err instanceof UnsafeEntryError
        ? 'unsafe'
        : err instanceof TarFormatError
          ? 'format'
          : err instanceof CapError
            ? err.reason
            : (err as NodeJS.ErrnoException)?.code === 'ENOSPC' || (err as NodeJS.ErrnoException)?.code === 'EDQUOT'
              ? 'no-space'
              : 'io';
    post({ type: 'error', message: (err as Error)?.message ?? String(err), reason });
  }

  /** Closes everything; the caller removes the files. */
  release(): void {
    this.decompressor?.removeAllListeners('data');
    this.decompressor?.on('error', () => {});
    this.decompressor?.destroy();
    this.extractor?.abort();
    if (this.blobFd >= 0) {
      try {
        closeSync(this.blobFd);
      } catch {
        // already failing
      }
      this.blobFd = -1;
    }
  }

  /** Feeds the whole input from a file (a blob already in the content store). */
  async readFrom(path: string): Promise<void> {
    const fd = openSync(path, 'r');
    try {
      const buf = Buffer.allocUnsafe(READ_CHUNK);
      for (;;) {
        const n = readSync(fd, buf, 0, READ_CHUNK, null);
        if (n === 0 || this.failed) break;
        // The decompressor keeps a reference to what it is given: hand it a copy.
        await new Promise<void>((resolve) => this.write(Buffer.from(buf.subarray(0, n)), resolve));
      }
    } finally {
      closeSync(fd);
    }
    this.end();
  }
}

let run: JobRun | undefined;

port.on('message', (msg: WorkerRequest) => {
  switch (msg.type) {
    case 'start':
      try {
        run = new JobRun(msg.job);
      } catch (err) {
        run = undefined;
        post({ type: 'error', message: (err as Error).message, reason: 'io' });
        return;
      }
      if (msg.job.sourcePath) {
        const r = run;
        r.readFrom(msg.job.sourcePath).catch((err: unknown) => r.fail(err));
      }
      break;
    case 'chunk': {
      const chunk = Buffer.from(msg.data, 0, msg.length);
      run?.write(chunk, () => post({ type: 'ack', bytes: msg.length }));
      break;
    }
    case 'end':
      run?.end();
      break;
    case 'abort':
      run?.release();
      run = undefined;
      post({ type: 'aborted' });
      break;
  }
});
