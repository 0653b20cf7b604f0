/**
 * Responses the kubelet reads far more often than they change (a record's status, its list entry) are
 * encoded once and their wire bytes reused: encoding dominated those calls. A response is marked by
 * its handler, keyed by the object itself, so only objects nobody modifies may be marked (records are
 * replaced on every change, and so are the messages built from them).
 */
import type { ServiceDefinition } from '@grpc/grpc-js';
import { oncePerObject } from '../common/memo.js';

/** null: marked, not sent yet; an array: the message is the concatenation of these parts. */
const marks = new WeakMap<object, Buffer | null | readonly object[]>();

/** Marks `message` as never modified again: its wire bytes are kept after the first send. */
export function encodeOnce<T extends object>(message: T): T {
  if (!marks.has(message)) marks.set(message, null);
  return message;
}

/**
 * Marks `message` as never modified again and encodes it now with `encode` (its type's own encoder),
 * ahead of its first send: for an answer that is asked for right after the record it comes from is
 * made, so that the first call finds its bytes ready.
 */
export function encodeAhead<T extends object>(message: T, encode: (message: T) => Uint8Array): T {
  if (!Buffer.isBuffer(marks.get(message))) {
    const bytes = encode(message);
    marks.set(message, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  }
  return message;
}

/**
 * Marks `message` as encoded by concatenating the encodings of `parts`, messages of its own type (a
 * parser merges concatenated messages: repeated fields append in order, a later scalar wins). Parts
 * marked with encodeOnce are encoded once, whatever message they go into.
 */
export function encodeAsParts<T extends object>(message: T, parts: readonly T[]): T {
  marks.set(message, parts);
  return message;
}

/** `serialize` with the marks above honoured. */
export function reusingSerializer(serialize: (value: unknown) => Buffer): (value: unknown) => Buffer {
  const encode = (value: unknown): Buffer => {
    if (typeof value !== 'object' || value === null) return serialize(value);
    const mark = marks.get(value);
    if (mark === undefined) return serialize(value);
    if (mark === null) {
      const bytes = serialize(value);
      marks.set(value, bytes);
      return bytes;
    }
    if (Buffer.isBuffer(mark)) return mark;
    return Buffer.concat(mark.map(encode));
  };
  return encode;
}

/** `definition` with every response serializer honouring the marks. */
export function withWireReuse(definition: ServiceDefinition): ServiceDefinition {
  return Object.fromEntries(
    Object.entries(definition).map(([key, method]) => [
      key,
      { ...method, responseSerialize: reusingSerializer(method.responseSerialize as (value: unknown) => Buffer) },
    ]),
  );
}

/**
 * A response built from `key` (a record) once per key object and encoded once; `build` must depend on
 * `key` alone, so a changed record (a new object) gets a new response.
 */
export function responsePerKey<K extends object, T extends object>(build: (key: K) => T): (key: K) => T {
  return oncePerObject((key: K) => encodeOnce(build(key)));
}
