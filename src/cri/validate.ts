/** Request checks shared by every RPC: each failure is INVALID_ARGUMENT naming the CRI field. */
import { invalidArgument } from '../common/errors.js';

/** The value, or an INVALID_ARGUMENT error naming the missing field. */
export function required<T>(value: T | undefined | null, field: string): T {
  if (value === undefined || value === null) throw invalidArgument(`${field} is required`);
  if (typeof value === 'string' && value === '') throw invalidArgument(`${field} is required`);
  return value;
}

/** Checks that a string field is not empty and returns it. */
export function requiredString(value: string | undefined, field: string): string {
  return required(value, field);
}
