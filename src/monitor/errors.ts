/** Errors of the container monitor (conmon): a StoveError kind plus the container it concerns. */
import { StoveError, type ErrorKind } from '../common/errors.js';

/** Something conmon or the runtime under it reported, or a failure to talk to conmon. */
export class MonitorError extends StoveError {
  constructor(
    kind: ErrorKind,
    message: string,
    readonly containerId: string,
    options?: { cause?: unknown },
  ) {
    super(kind, message, options);
    this.name = `MonitorError(${kind})`;
  }
}
