/**
 * Waiting for a condition that gives no event to wait on (a file conmon writes, a process that is not
 * the daemon's child going away): one loop with a deadline, a back-off between looks and an abort
 * signal, instead of a loop of its own with its own interval in each place.
 */
import { setTimeout as sleep } from 'node:timers/promises';

export interface PollOptions {
  /** Looks for at most this long; one more look is taken at the deadline. */
  timeoutMs: number;
  /** The first pause between looks (default 5 ms); each pause doubles, up to maxIntervalMs. */
  intervalMs?: number;
  /** The longest pause between looks (default 100 ms). */
  maxIntervalMs?: number;
  /** Stops the wait: poll rejects with the signal's reason. */
  signal?: AbortSignal;
}

/**
 * Calls `look` until it returns something other than undefined and returns that, or returns undefined
 * when the deadline passes first. An error `look` throws ends the wait with that error.
 */
export async function poll<T>(look: () => Promise<T | undefined> | T | undefined, options: PollOptions): Promise<T | undefined> {
  const deadline = performance.now() + options.timeoutMs;
  const maxInterval = options.maxIntervalMs ?? 100;
  let interval = Math.min(options.intervalMs ?? 5, maxInterval);
  for (;;) {
    options.signal?.throwIfAborted();
    const found = await look();
    if (found !== undefined) return found;
    const left = deadline - performance.now();
    if (left <= 0) return undefined;
    await sleep(Math.min(interval, left), undefined, options.signal ? { signal: options.signal } : undefined).catch((err: unknown) => {
      throw options.signal?.aborted ? options.signal.reason : err;
    });
    interval = Math.min(interval * 2, maxInterval);
  }
}

/** Waits until `done` is true; false when the deadline passed first. */
export async function pollUntil(done: () => Promise<boolean> | boolean, options: PollOptions): Promise<boolean> {
  return (await poll(async () => ((await done()) ? true : undefined), options)) ?? false;
}
