/**
 * Reading a registry's (or token server's) answer into memory without trusting it: at most `max`
 * bytes, no gap longer than the stall timeout between chunks, and the whole body within a deadline (a
 * body that drips one byte just inside every stall timeout would otherwise hold a pull for days).
 */
import type { Dispatcher } from 'undici';
import { StoveError, failedPrecondition } from '../common/errors.js';

/** A transfer that stopped sending bytes, or sends them too slowly to ever finish. */
export class StallError extends StoveError {
  constructor(message: string) {
    super('Unavailable', message);
  }
}

export interface BodyBounds {
  /** Bytes at most; more is FAILED_PRECONDITION. */
  max: number;
  /** What is read, for messages (`manifest "latest"`, `token reply from …`). */
  what: string;
  /** No chunk for this long fails (`images.stall_timeout_seconds`). */
  stallMs: number;
  /** The whole body must arrive within this long. */
  deadlineMs: number;
}

const TIMEOUT = Symbol('timeout');

export async function readBounded(body: Dispatcher.ResponseData['body'], bounds: BodyBounds): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  const started = performance.now();
  const iterator = body[Symbol.asyncIterator]();
  try {
    for (;;) {
      const left = bounds.deadlineMs - (performance.now() - started);
      const wait = Math.max(0, Math.min(bounds.stallMs, left));
      const next = iterator.next();
      // Destroying the body below rejects this read; that rejection is expected.
      next.catch(() => {});
      let timer: NodeJS.Timeout | undefined;
      const result = await Promise.race([next, new Promise<typeof TIMEOUT>((resolve) => (timer = setTimeout(() => resolve(TIMEOUT), wait)))]);
      clearTimeout(timer);
      if (result === TIMEOUT) {
        const seconds = (performance.now() - started) / 1000;
        throw new StallError(
          wait < bounds.stallMs
            ? `${bounds.what} did not arrive within ${(bounds.deadlineMs / 1000).toFixed(0)}s (${total} bytes after ${seconds.toFixed(1)}s; images.stall_timeout_seconds)`
            : `${bounds.what} stalled: no data for ${bounds.stallMs / 1000}s after ${total} bytes (images.stall_timeout_seconds)`,
        );
      }
      if (result.done) return Buffer.concat(chunks);
      const chunk = result.value as Buffer;
      total += chunk.length;
      if (total > bounds.max) throw failedPrecondition(`${bounds.what} is larger than ${bounds.max} bytes`);
      chunks.push(chunk);
    }
  } catch (err) {
    body.destroy();
    throw err;
  }
}
