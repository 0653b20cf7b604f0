/**
 * Undo steps for multi-step creates. Push an undo right after each acquisition; on failure, `unwind`
 * runs them in reverse, logs any that fail, and leaves the original error to be rethrown.
 */
import type { Logger } from './logger.js';
import { messageOf } from './errors.js';

export class CleanupStack {
  private readonly steps: { description: string; undo: () => Promise<void> | void }[] = [];

  constructor(private readonly log: Logger) {}

  /** Registers an undo step. */
  push(description: string, undo: () => Promise<void> | void): void {
    this.steps.push({ description, undo });
  }

  /** Runs every undo step, newest first; failures are logged, never thrown. */
  async unwind(): Promise<void> {
    while (this.steps.length > 0) {
      const step = this.steps.pop()!;
      try {
        await step.undo();
      } catch (err) {
        this.log.error('cleanup step failed', { step: step.description, error: messageOf(err) });
      }
    }
  }

  /** Forgets every step: the create succeeded and owns its resources now. */
  release(): void {
    this.steps.length = 0;
  }
}

/** Runs `body` with a CleanupStack that unwinds if body throws, then rethrows. */
export async function withCleanup<T>(log: Logger, body: (cleanup: CleanupStack) => Promise<T>): Promise<T> {
  const cleanup = new CleanupStack(log);
  try {
    const result = await body(cleanup);
    cleanup.release();
    return result;
  } catch (err) {
    await cleanup.unwind();
    throw err;
  }
}
