/** Small helpers for multi-step operations: settle parallel steps together, time each step. */
import { tracer } from '../observability/hooks.js';

/** Waits for every task; once all have settled, throws the first failure (in task order). */
export async function settleAll<T extends readonly unknown[]>(tasks: { [K in keyof T]: Promise<T[K]> }): Promise<T> {
  // allSettled, not all: a step still running when another fails must finish registering its undo
  // before the cleanup unwinds.
  const results = await Promise.allSettled(tasks);
  const failed = results.find((r) => r.status === 'rejected');
  if (failed) throw (failed as PromiseRejectedResult).reason;
  return results.map((r) => (r as PromiseFulfilledResult<unknown>).value) as unknown as T;
}

/** Milliseconds per named step, for the log lines that show where an RPC's time goes; each step is a trace span. */
export class StepTimer {
  private readonly started = performance.now();
  readonly steps: Record<string, number> = {};

  async time<T>(name: string, body: () => Promise<T>): Promise<T> {
    const t = performance.now();
    try {
      return await tracer().span(name, {}, body);
    } finally {
      this.steps[name] = +(performance.now() - t).toFixed(1);
    }
  }

  total(): number {
    return +(performance.now() - this.started).toFixed(1);
  }
}
