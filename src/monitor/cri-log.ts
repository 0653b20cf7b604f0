/**
 * The CRI container log format conmon writes: `<RFC3339Nano time> <stdout|stderr> <F|P> <content>\n`.
 * `F` ends a line; `P` is a partial chunk to which conmon appended a `\n` of its own (CRI-O parseLog).
 */

/** Output split back into the two streams. */
export interface ParsedLog {
  stdout: Buffer;
  stderr: Buffer;
  /** True when output beyond `maxBytes` was dropped. */
  truncated: boolean;
}

/** Splits a CRI log into stdout and stderr, keeping at most `maxBytes` in total. */
export function parseCriLog(log: Buffer, maxBytes = Number.MAX_SAFE_INTEGER): ParsedLog {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let total = 0;
  let truncated = false;
  let start = 0;
  while (start < log.length) {
    let end = log.indexOf(0x0a, start);
    if (end < 0) end = log.length;
    const entry = parseEntry(log.subarray(start, end));
    start = end + 1;
    if (!entry) continue;
    let content = entry.partial ? entry.content : Buffer.concat([entry.content, NEWLINE]);
    if (total + content.length > maxBytes) {
      content = content.subarray(0, maxBytes - total);
      truncated = true;
    }
    total += content.length;
    (entry.stream === 'stderr' ? err : out).push(content);
    if (truncated) break;
  }
  return { stdout: Buffer.concat(out), stderr: Buffer.concat(err), truncated };
}

const NEWLINE = Buffer.from('\n');

interface Entry {
  stream: 'stdout' | 'stderr';
  partial: boolean;
  content: Buffer;
}

/** One log line without its final newline; undefined for anything malformed. */
function parseEntry(line: Buffer): Entry | undefined {
  const s1 = line.indexOf(0x20);
  if (s1 < 0) return undefined;
  const s2 = line.indexOf(0x20, s1 + 1);
  if (s2 < 0) return undefined;
  const stream = line.toString('latin1', s1 + 1, s2);
  if (stream !== 'stdout' && stream !== 'stderr') return undefined;
  const tag = line.toString('latin1', s2 + 1, s2 + 2);
  if (tag !== 'F' && tag !== 'P') return undefined;
  return { stream, partial: tag === 'P', content: line.subarray(Math.min(s2 + 3, line.length)) };
}
