/** Timing the steps of a multi-step operation: for the log lines that show where an RPC's time goes, and as trace spans. */
import type { Telemetry } from './hooks.js';

/** Milliseconds per named step; each step is a trace span. */
export class StepTimer {
  private readonly started = performance.now();
  /** The end of the last lap. */
  private mark = this.started;
  readonly steps: Record<string, number> = {};

  /** Spans go to `telemetry`'s tracer (its no-op when tracing is off). */
  constructor(private readonly telemetry: Telemetry) {}

  /** Runs one step as a span of its own; steps may run side by side. */
  async time<T>(name: string, body: () => Promise<T>): Promise<T> {
    const t = performance.now();
    try {
      return await this.telemetry.tracer.span(name, {}, body);
    } finally {
      this.steps[name] = +(performance.now() - t).toFixed(1);
    }
  }

  /**
   * Ends a step of a sequence: it took the time since the last lap (or the start). Its span starts at
   * `spanFrom` when the step's own work began later than that (default: the last lap).
   */
  lap(name: string, spanFrom = this.mark): void {
    const now = performance.now();
    this.steps[name] = +(now - this.mark).toFixed(1);
    this.telemetry.tracer.step(name, spanFrom, now);
    this.mark = now;
  }

  /** The next lap starts now: the time before it belongs to no step. */
  startLaps(): void {
    this.mark = performance.now();
  }

  total(): number {
    return +(performance.now() - this.started).toFixed(1);
  }
}
