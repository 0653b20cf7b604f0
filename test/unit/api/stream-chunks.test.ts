import assert from 'node:assert/strict';
import { chunksOf, loadInSlices, writeChunked } from '../../../src/api/stream-chunks.js';
import type { StreamSink } from '../../../src/api/handlers.js';

/** A sink that records messages; `closeAfter` closes it after that many writes, like a client going away. */
function recordingSink<T>(closeAfter = Infinity): StreamSink<T> & { messages: T[] } {
  const messages: T[] = [];
  let closed = false;
  return {
    messages,
    write(m) {
      messages.push(m);
      if (messages.length >= closeAfter) closed = true;
      return !closed;
    },
    end() {
      closed = true;
    },
    onClose() {},
    get closed() {
      return closed;
    },
    drained: () => Promise.resolve(),
  };
}

describe('stream chunks', () => {
  it('splits at the item limit and keeps the order', () => {
    const items = Array.from({ length: 10 }, (_, i) => i);
    const chunks = [...chunksOf(items, () => 1, { maxItems: 4, maxBytes: 1000 })];
    assert.deepEqual(chunks, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]);
  });

  it('splits before a chunk would pass the byte limit; an oversized item goes alone', () => {
    const sizes = [3, 3, 3, 20, 1, 1];
    const chunks = [...chunksOf(sizes, (s) => s, { maxItems: 100, maxBytes: 7 })];
    assert.deepEqual(chunks, [[3, 3], [3], [20], [1, 1]]);
  });

  it('yields nothing for no items', () => {
    assert.deepEqual([...chunksOf([], () => 1)], []);
  });

  it('writes every batch in chunks and stops once the client is gone', async () => {
    const sink = recordingSink<number[]>();
    await writeChunked(sink, [[1, 2, 3], [4, 5]], () => 1, (c) => c, { maxItems: 2, maxBytes: 100 });
    assert.deepEqual(sink.messages, [[1, 2], [3], [4, 5]]);

    const early = recordingSink<number[]>(1);
    await writeChunked(early, [[1, 2, 3, 4]], () => 1, (c) => c, { maxItems: 1, maxBytes: 100 });
    assert.deepEqual(early.messages, [[1]]);
  });

  it('loads slices one after another', async () => {
    const seen: number[][] = [];
    const out: number[][] = [];
    for await (const batch of loadInSlices([1, 2, 3, 4, 5], 2, async (s) => (seen.push(s), s.map((x) => x * 10)))) out.push(batch);
    assert.deepEqual(seen, [[1, 2], [3, 4], [5]]);
    assert.deepEqual(out, [[10, 20], [30, 40], [50]]);
  });
});
