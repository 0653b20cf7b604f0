/**
 * The Stream* list RPCs send what their unary twin would, split into messages of bounded size, so a
 * node with thousands of objects never builds one message near the 16 MiB limit. A chunk closes at
 * `maxItems` items or once its encoded items reach `maxBytes`; a single item larger than that goes alone.
 */
import type { StreamSink } from './handlers.js';

export interface ChunkLimits {
  maxItems: number;
  maxBytes: number;
}

/** 256 items or 1 MiB per message: small next to the 16 MiB message cap, few messages for a large node. */
export const STREAM_CHUNK_LIMITS: ChunkLimits = { maxItems: 256, maxBytes: 1 << 20 };

/** `items` split in order into chunks within `limits`; `sizeOf` is an item's encoded size in bytes. */
export function* chunksOf<T>(items: Iterable<T>, sizeOf: (item: T) => number, limits: ChunkLimits = STREAM_CHUNK_LIMITS): Generator<T[]> {
  let chunk: T[] = [];
  let bytes = 0;
  for (const item of items) {
    const size = sizeOf(item);
    if (chunk.length > 0 && (chunk.length >= limits.maxItems || bytes + size > limits.maxBytes)) {
      yield chunk;
      chunk = [];
      bytes = 0;
    }
    chunk.push(item);
    bytes += size;
  }
  if (chunk.length > 0) yield chunk;
}

/**
 * Writes each batch from `batches` as chunked messages (`wrap` builds one message from a chunk),
 * waiting for the transport between messages and stopping early when the client went away. Nothing is
 * sent for an empty list: the stream just ends.
 */
export async function writeChunked<T, M>(
  sink: StreamSink<M>,
  batches: Iterable<T[]> | AsyncIterable<T[]>,
  sizeOf: (item: T) => number,
  wrap: (chunk: T[]) => M,
  limits: ChunkLimits = STREAM_CHUNK_LIMITS,
): Promise<void> {
  for await (const batch of batches) {
    for (const chunk of chunksOf(batch, sizeOf, limits)) {
      if (sink.closed) return;
      sink.write(wrap(chunk));
      await sink.drained();
    }
  }
}

/** `items` in consecutive slices of `size`, for work done per slice (stats read for a few hundred at a time). */
export function* slices<T>(items: readonly T[], size: number): Generator<T[]> {
  for (let i = 0; i < items.length; i += size) yield items.slice(i, i + size);
}

/** Maps each slice of `items` through `load`, one slice at a time. */
export async function* loadInSlices<T, R>(items: readonly T[], size: number, load: (slice: T[]) => Promise<R[]>): AsyncGenerator<R[]> {
  for (const slice of slices(items, size)) yield await load(slice);
}
