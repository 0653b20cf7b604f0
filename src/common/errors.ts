/**
 * Typed errors. Domain code throws a StoveError with a kind; only api/errors.ts turns kinds into gRPC
 * status codes, so no module below the API ever thinks in gRPC terms.
 */

/** What went wrong, in the vocabulary shared by containerd's errdefs and the CRI. */
export type ErrorKind =
  | 'InvalidArgument'
  | 'NotFound'
  | 'AlreadyExists'
  | 'FailedPrecondition'
  | 'ResourceExhausted'
  | 'DeadlineExceeded'
  | 'Cancelled'
  | 'Unavailable'
  | 'Unimplemented'
  | 'Internal';

/** An error whose kind decides the gRPC status at the edge. */
export class StoveError extends Error {
  readonly kind: ErrorKind;

  constructor(kind: ErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.kind = kind;
    this.name = `StoveError(${kind})`;
  }
}

export const invalidArgument = (message: string, cause?: unknown) => new StoveError('InvalidArgument', message, { cause });
export const notFound = (message: string, cause?: unknown) => new StoveError('NotFound', message, { cause });
export const alreadyExists = (message: string, cause?: unknown) => new StoveError('AlreadyExists', message, { cause });
export const failedPrecondition = (message: string, cause?: unknown) =>
  new StoveError('FailedPrecondition', message, { cause });
export const unavailable = (message: string, cause?: unknown) => new StoveError('Unavailable', message, { cause });
export const cancelled = (message: string, cause?: unknown) => new StoveError('Cancelled', message, { cause });
export const unimplemented = (message: string, cause?: unknown) => new StoveError('Unimplemented', message, { cause });
export const internal = (message: string, cause?: unknown) => new StoveError('Internal', message, { cause });

/** The error's own message, whatever was thrown. */
export function messageOf(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

/**
 * Adds context in the Kubernetes style (`failed to X for sandbox "id": <cause>`) and keeps the kind of
 * a StoveError cause, so wrapping never turns a NotFound into an Internal.
 */
export function wrap(err: unknown, context: string, kind?: ErrorKind): StoveError {
  const causeKind = err instanceof StoveError ? err.kind : 'Internal';
  return new StoveError(kind ?? causeKind, `${context}: ${messageOf(err)}`, { cause: err });
}

/** True when err is a StoveError of the given kind. */
export function isKind(err: unknown, kind: ErrorKind): boolean {
  return err instanceof StoveError && err.kind === kind;
}
