/** In-process concurrency helpers: per-key mutual exclusion and single-flight deduplication. */

/** Serialises async work per key; different keys run in parallel. */
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<void>>();

  async run<T>(key: string, body: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const current = new Promise<void>((resolve) => (release = resolve));
    const tail = previous.then(() => current);
    this.tails.set(key, tail);
    await previous;
    try {
      return await body();
    } finally {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }
}

interface Flight<T> {
  readonly promise: Promise<T>;
  readonly controller: AbortController;
  /** Callers still waiting that could leave (a caller without a signal never does: `pinned`). */
  waiting: number;
  pinned: boolean;
}

/**
 * Concurrent calls with the same key share one execution and its result. A caller with a signal stops
 * waiting when it aborts (rejected with its reason); the execution is aborted (the signal `body` gets)
 * only when every caller has left, so one caller leaving never cancels the work another waits for. An
 * aborted execution is no longer joined: the next caller starts a new one.
 */
export class SingleFlight<T> {
  private readonly inFlight = new Map<string, Flight<T>>();

  run(key: string, body: (signal: AbortSignal) => Promise<T>, signal?: AbortSignal): Promise<T> {
    if (signal?.aborted) return Promise.reject(signal.reason as Error);
    let flight = this.inFlight.get(key);
    if (!flight) {
      const controller = new AbortController();
      const started: Flight<T> = {
        promise: body(controller.signal).finally(() => {
          if (this.inFlight.get(key) === started) this.inFlight.delete(key);
        }),
        controller,
        waiting: 0,
        pinned: false,
      };
      this.inFlight.set(key, started);
      flight = started;
    }
    return signal ? this.join(key, flight, signal) : ((flight.pinned = true), flight.promise);
  }

  private join(key: string, flight: Flight<T>, signal: AbortSignal): Promise<T> {
    flight.waiting++;
    return new Promise<T>((resolve, reject) => {
      const leave = () => {
        reject(signal.reason as Error);
        if (--flight.waiting > 0 || flight.pinned) return;
        if (this.inFlight.get(key) === flight) this.inFlight.delete(key);
        flight.controller.abort(signal.reason);
      };
      signal.addEventListener('abort', leave, { once: true });
      const settle = () => signal.removeEventListener('abort', leave);
      flight.promise.then(
        (value) => {
          settle();
          resolve(value);
        },
        (err: unknown) => {
          settle();
          reject(err as Error);
        },
      );
    });
  }
}
