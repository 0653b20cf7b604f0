/** Timing the steps of a multi-step operation. */
import { tracer } from '../observability/hooks.js';

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
