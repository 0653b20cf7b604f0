/**
 * A small pool of unpack worker threads. `run` hands one layer job to a free worker and streams the
 * blob's bytes to it in batches (transferred, not copied), with flow control: the producer waits
 * while more than a few MiB are queued in the worker, so a fast network never piles up memory.
 */
import { Worker } from 'node:worker_threads';
import { answerMknod } from './mknod-bridge.js';
import type { FailureReason, UnpackJob, UnpackResult, WorkerReply, WorkerRequest } from './unpack-protocol.js';
import { unavailable } from '../common/errors.js';

export type { UnpackJob, UnpackResult } from './unpack-protocol.js';

/** Why a layer job failed: `unsafe` entries, a `format` problem, a size or space cap, or an `io` error. */
export class LayerJobError extends Error {
  constructor(
    message: string,
    readonly reason: FailureReason,
  ) {
    super(message);
    this.name = 'LayerJobError';
  }
}

const BATCH = 256 * 1024;
const MAX_IN_FLIGHT = 8 * 1024 * 1024;
const WORKER_URL = new URL('./unpack-worker.js', import.meta.url);

interface PoolWorker {
  worker: Worker;
  onReply?: (reply: WorkerReply) => void;
  onExit?: (err: Error) => void;
  idleTimer?: NodeJS.Timeout;
}

/** One job's conversation with its worker. */
class Session {
  private inFlight = 0;
  private waiter?: () => void;
  error?: Error;
  private settle!: { resolve: (r: UnpackResult) => void; reject: (e: Error) => void };
  readonly result: Promise<UnpackResult>;
  private abortedWaiter?: () => void;
  finished = false;
  private batch?: Buffer;
  private batchLength = 0;

  constructor(private readonly w: PoolWorker) {
    this.result = new Promise((resolve, reject) => (this.settle = { resolve, reject }));
    this.result.catch(() => {});
    w.onReply = (reply) => this.onReply(reply);
    w.onExit = (err) => this.onFailure(err);
  }

  private onReply(reply: WorkerReply): void {
    switch (reply.type) {
      case 'ack':
        this.inFlight -= reply.bytes;
        if (this.inFlight <= MAX_IN_FLIGHT / 2) this.wake();
        break;
      case 'done':
        this.finished = true;
        this.settle.resolve(reply.result);
        this.wake();
        break;
      case 'error':
        this.onFailure(new LayerJobError(reply.message, reply.reason));
        break;
      case 'aborted':
        this.abortedWaiter?.();
        break;
    }
  }

  private onFailure(err: Error): void {
    if (this.finished) {
      this.abortedWaiter?.();
      return;
    }
    this.finished = true;
    this.error = err;
    this.settle.reject(err);
    this.wake();
    this.abortedWaiter?.();
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  post(msg: WorkerRequest, transfer?: ArrayBuffer[]): void {
    this.w.worker.postMessage(msg, transfer ?? []);
  }

  /** Queues bytes for the worker; resolves when there is room for more. */
  async feed(chunk: Uint8Array): Promise<void> {
    let offset = 0;
    while (offset < chunk.length) {
      this.throwIfFailed();
      this.batch ??= Buffer.allocUnsafeSlow(BATCH);
      const n = Math.min(BATCH - this.batchLength, chunk.length - offset);
      this.batch.set(chunk.subarray(offset, offset + n), this.batchLength);
      this.batchLength += n;
      offset += n;
      if (this.batchLength === BATCH) await this.flush();
    }
  }

  /** Sends the current batch and waits while too much is queued. */
  async flush(): Promise<void> {
    this.throwIfFailed();
    if (this.batch && this.batchLength > 0) {
      const data = this.batch.buffer as ArrayBuffer;
      const length = this.batchLength;
      this.batch = undefined;
      this.batchLength = 0;
      this.inFlight += length;
      this.post({ type: 'chunk', data, length }, [data]);
    }
    while (this.inFlight > MAX_IN_FLIGHT && !this.finished) await new Promise<void>((r) => (this.waiter = r));
    this.throwIfFailed();
  }

  /** The worker's failure, once there is one (a method, so the check is not narrowed away across awaits). */
  private throwIfFailed(): void {
    if (this.error) throw this.error;
  }

  /** Tells the worker to drop the job and waits until it has closed its files. */
  async abort(): Promise<void> {
    if (this.finished && this.error) return;
    const aborted = new Promise<void>((r) => (this.abortedWaiter = r));
    this.post({ type: 'abort' });
    await aborted;
  }
}

export interface UnpackPoolOptions {
  /** Maximum worker threads (and so concurrent layer jobs). */
  size: number;
  /** Idle workers exit after this long. */
  idleMs?: number;
}

export class UnpackPool {
  private readonly idle: PoolWorker[] = [];
  private readonly all = new Set<PoolWorker>();
  private readonly queue: ((w: PoolWorker) => void)[] = [];
  private closed = false;

  constructor(private readonly options: UnpackPoolOptions) {}

  private spawn(): PoolWorker {
    const worker = new Worker(WORKER_URL);
    worker.unref();
    const w: PoolWorker = { worker };
    worker.on('message', (reply: WorkerReply) => {
      if (reply.type === 'mknod') void answerMknod(reply);
      else w.onReply?.(reply);
    });
    const gone = (err: Error) => {
      this.all.delete(w);
      const i = this.idle.indexOf(w);
      if (i >= 0) this.idle.splice(i, 1);
      clearTimeout(w.idleTimer);
      w.onExit?.(err);
    };
    worker.on('error', (err: Error) => gone(err));
    worker.on('exit', (code) => gone(new LayerJobError(`unpack worker exited with code ${code}`, 'io')));
    this.all.add(w);
    return w;
  }

  private async acquire(): Promise<PoolWorker> {
    if (this.closed) throw unavailable('unpack pool is closed');
    const w = this.idle.pop();
    if (w) {
      clearTimeout(w.idleTimer);
      return w;
    }
    if (this.all.size < this.options.size) return this.spawn();
    return new Promise((resolve) => this.queue.push(resolve));
  }

  private release(w: PoolWorker): void {
    w.onReply = undefined;
    w.onExit = undefined;
    if (!this.all.has(w)) {
      // It died: let a waiter spawn a replacement.
      const next = this.queue.shift();
      if (next) next(this.spawn());
      return;
    }
    const next = this.queue.shift();
    if (next) return next(w);
    w.idleTimer = setTimeout(() => {
      const i = this.idle.indexOf(w);
      if (i >= 0) this.idle.splice(i, 1);
      this.all.delete(w);
      void w.worker.terminate();
    }, this.options.idleMs ?? 30_000);
    w.idleTimer.unref();
    this.idle.push(w);
  }

  /**
   * Runs one job. With `source`, its bytes are the blob; otherwise the job reads `sourcePath`.
   * Throws LayerJobError for a bad layer; when the source itself fails, its error is thrown after
   * the worker has closed every file (the caller removes them).
   */
  async run(job: UnpackJob, source?: AsyncIterable<Uint8Array>): Promise<UnpackResult> {
    const w = await this.acquire();
    const session = new Session(w);
    try {
      session.post({ type: 'start', job });
      if (source) {
        try {
          for await (const chunk of source) await session.feed(chunk);
          await session.flush();
        } catch (err) {
          if (!session.finished) await session.abort();
          throw session.error ?? err;
        }
        session.post({ type: 'end' });
      }
      return await session.result;
    } finally {
      this.release(w);
    }
  }

  /** Ends every worker. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.all].map((w) => w.worker.terminate()));
    this.all.clear();
    this.idle.length = 0;
  }
}
