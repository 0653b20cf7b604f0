/** Bytes received in pieces, taken off the front in whole messages without re-copying on each piece. */
export class ByteQueue {
  private chunks: Buffer[] = [];
  private size = 0;

  get length(): number {
    return this.size;
  }

  push(data: Buffer): void {
    if (data.length === 0) return;
    this.chunks.push(data);
    this.size += data.length;
  }

  /** The first n bytes, left in the queue (n <= length). */
  peek(n: number): Buffer {
    this.gather(n);
    return this.chunks[0].subarray(0, n);
  }

  /** Removes and returns the first n bytes (n <= length). */
  take(n: number): Buffer {
    if (n === 0) return Buffer.alloc(0);
    this.gather(n);
    const first = this.chunks[0];
    const out = first.subarray(0, n);
    if (first.length === n) this.chunks.shift();
    else this.chunks[0] = first.subarray(n);
    this.size -= n;
    return out;
  }

  /** Joins just enough leading chunks that the first holds n bytes. */
  private gather(n: number): void {
    if (this.chunks[0].length >= n) return;
    let count = 0;
    let have = 0;
    while (have < n) have += this.chunks[count++].length;
    this.chunks.splice(0, count, Buffer.concat(this.chunks.slice(0, count), have));
  }
}
