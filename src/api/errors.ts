/** The one place where Stove's error kinds become gRPC status codes. */
import { status, type ServiceError, Metadata } from '@grpc/grpc-js';
import { StoveError, type ErrorKind, messageOf } from '../common/errors.js';

const CODES: Record<ErrorKind, status> = {
  InvalidArgument: status.INVALID_ARGUMENT,
  NotFound: status.NOT_FOUND,
  AlreadyExists: status.ALREADY_EXISTS,
  FailedPrecondition: status.FAILED_PRECONDITION,
  ResourceExhausted: status.RESOURCE_EXHAUSTED,
  DeadlineExceeded: status.DEADLINE_EXCEEDED,
  Cancelled: status.CANCELLED,
  Unavailable: status.UNAVAILABLE,
  Unimplemented: status.UNIMPLEMENTED,
  Internal: status.INTERNAL,
};

/** A grpc-js error object for any thrown value; unknown errors become UNKNOWN with their message. */
export function toServiceError(err: unknown): Partial<ServiceError> & { code: status; details: string } {
  const code = err instanceof StoveError ? CODES[err.kind] : status.UNKNOWN;
  const details = messageOf(err);
  return { name: 'ServiceError', message: details, code, details, metadata: new Metadata() };
}

/** The gRPC status name for logs, e.g. "NOT_FOUND". */
export function statusName(code: status): string {
  return status[code] ?? String(code);
}
