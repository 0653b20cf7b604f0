/**
 * Waiting in tests: poll a condition until it holds or a deadline passes. Tests wait on the event or
 * the state they need, never for a fixed time; on timeout the message says what did not happen.
 */

export interface WaitOptions {
  /** Give up after this long (default 5 s). */
  timeoutMs?: number;
  /** Time between checks (default 20 ms). */
  intervalMs?: number;
}

/**
 * Resolves once `check` returns true (a throw counts as false); rejects with "timed out waiting for
 * <what>" otherwise. A number as the third argument is the timeout.
 */
export async function eventually(what: string, check: () => boolean | Promise<boolean>, options: WaitOptions | number = {}): Promise<void> {
  await waitFor(what, async () => ((await check()) ? true : undefined), options);
}

/** The first value `get` returns that is not undefined (a throw counts as undefined; the last one is quoted on time-out). */
export async function waitFor<T>(what: string, get: () => T | undefined | Promise<T | undefined>, options: WaitOptions | number = {}): Promise<T> {
  const { timeoutMs = 5000, intervalMs = 20 } = typeof options === 'number' ? { timeoutMs: options } : options;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    let value: T | undefined;
    try {
      value = await get();
    } catch (err) {
      value = undefined;
      lastError = err;
    }
    if (value !== undefined) return value;
    if (Date.now() >= deadline) {
      const why = lastError instanceof Error ? `; the last check failed: ${lastError.message}` : '';
      throw new Error(`timed out waiting for ${what} (${timeoutMs} ms)${why}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
