/**
 * HPACK (RFC 7541), the header compression of HTTP/2: a decoder for the peer's header blocks, which
 * share one dynamic table per connection, and a stateless encoder for ours.
 *
 * Every block is hostile: integers are bounded, lengths and indices are checked before use, table size
 * updates are only accepted where §4.2 allows them and never above what we advertise, and Huffman
 * strings are checked for EOS and for padding (§5.2). Decoding is linear in the block: an indexed field
 * costs one table lookup and hands back the stored strings, and fields past the header list limit are
 * decoded (the dynamic table must follow the peer's encoder) but not kept.
 *
 * Strings are octets held as latin1 strings, so a string's length is its size in octets.
 */

/** A malformed header block (RFC 7541 §2.3/§5/§6): the HTTP/2 connection ends with COMPRESSION_ERROR. */
export class HpackError extends Error {
  override readonly name = 'HpackError';
}

/** RFC 7541 Appendix A; index i + 1 is STATIC_TABLE[i]. */
const STATIC_TABLE: ReadonlyArray<readonly [string, string]> = [
  [':authority', ''],
  [':method', 'GET'],
  [':method', 'POST'],
  [':path', '/'],
  [':path', '/index.html'],
  [':scheme', 'http'],
  [':scheme', 'https'],
  [':status', '200'],
  [':status', '204'],
  [':status', '206'],
  [':status', '304'],
  [':status', '400'],
  [':status', '404'],
  [':status', '500'],
  ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'],
  ['accept-language', ''],
  ['accept-ranges', ''],
  ['accept', ''],
  ['access-control-allow-origin', ''],
  ['age', ''],
  ['allow', ''],
  ['authorization', ''],
  ['cache-control', ''],
  ['content-disposition', ''],
  ['content-encoding', ''],
  ['content-language', ''],
  ['content-length', ''],
  ['content-location', ''],
  ['content-range', ''],
  ['content-type', ''],
  ['cookie', ''],
  ['date', ''],
  ['etag', ''],
  ['expect', ''],
  ['expires', ''],
  ['from', ''],
  ['host', ''],
  ['if-match', ''],
  ['if-modified-since', ''],
  ['if-none-match', ''],
  ['if-range', ''],
  ['if-unmodified-since', ''],
  ['last-modified', ''],
  ['link', ''],
  ['location', ''],
  ['max-forwards', ''],
  ['proxy-authenticate', ''],
  ['proxy-authorization', ''],
  ['range', ''],
  ['referer', ''],
  ['refresh', ''],
  ['retry-after', ''],
  ['server', ''],
  ['set-cookie', ''],
  ['strict-transport-security', ''],
  ['transfer-encoding', ''],
  ['user-agent', ''],
  ['vary', ''],
  ['via', ''],
  ['www-authenticate', ''],
];

/** §4.1: an entry's size is its name and value octets plus 32. */
const ENTRY_OVERHEAD = 32;

/**
 * A prefix-coded integer may take at most this many continuation bytes (28 bits): enough for any length
 * or index a sane peer sends, and it keeps every value far below 2^31 - 1.
 */
const MAX_INTEGER_CONTINUATIONS = 4;

// ---- Huffman (§5.2, Appendix B) ----

/**
 * The code length of each symbol 0..255 and EOS (256), RFC 7541 Appendix B. The RFC's code is canonical
 * (codes of one length are consecutive, in symbol order, and each length continues from the last code
 * of the shorter one), so the codes themselves follow from these lengths.
 */
const HUFFMAN_CODE_LENGTHS = [
  13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
  28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
  6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
  5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
  13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
  7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
  15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
  6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
  20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
  24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
  22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
  21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
  26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
  19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
  20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
  26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
  30,
];
const EOS = 256;
/** The longest code (EOS's). */
const MAX_CODE_LENGTH = 30;

/**
 * The code as canonical tables: how many codes each length has, the first code of each length, and
 * the symbols sorted by (length, symbol) with where each length starts among them. Built in a few
 * hundred steps: a decoder table of thousands built at load made V8 optimise the builder at once,
 * faulting ~8 MiB of its compilers' pages into an idle daemon.
 */
function canonicalHuffman(): { count: Uint16Array; first: Int32Array; offset: Uint16Array; symbols: Uint16Array } {
  const count = new Uint16Array(MAX_CODE_LENGTH + 1);
  for (const length of HUFFMAN_CODE_LENGTHS) count[length]!++;
  const first = new Int32Array(MAX_CODE_LENGTH + 2);
  const offset = new Uint16Array(MAX_CODE_LENGTH + 2);
  let code = 0;
  for (let length = 1; length <= MAX_CODE_LENGTH; length++) {
    first[length] = code;
    offset[length + 1] = offset[length]! + count[length]!;
    code = (code + count[length]!) * 2;
  }
  const next = offset.slice();
  const symbols = new Uint16Array(EOS + 1);
  HUFFMAN_CODE_LENGTHS.forEach((length, symbol) => (symbols[next[length]!++] = symbol));
  return { count, first, offset, symbols };
}

const HUFFMAN = canonicalHuffman();

/** Decoded octets go here before they become a string; grown as needed, shared (decoding is synchronous). */
let huffmanScratch = Buffer.allocUnsafe(4096);

/**
 * The Huffman-coded string in block[start, end), as a latin1 string. Bit by bit: the bits read so far
 * are a whole code once they fall among the codes of their length (a longer code's prefix sorts after
 * them, canonical codes being consecutive). Linear in the octets; header values are short, and the
 * ones a client repeats come from the dynamic table, not from here.
 */
function decodeHuffman(block: Buffer, start: number, end: number): string {
  // The shortest code is 5 bits, so n octets decode to at most 8n/5 symbols.
  const most = Math.ceil(((end - start) * 8) / 5);
  if (huffmanScratch.length < most) huffmanScratch = Buffer.allocUnsafe(Math.max(most, 2 * huffmanScratch.length));
  const out = huffmanScratch;
  const { count, first, offset, symbols } = HUFFMAN;
  let length = 0;
  let code = 0;
  let bits = 0;
  for (let i = start; i < end; i++) {
    const byte = block[i]!;
    for (let bit = 7; bit >= 0; bit--) {
      code = (code << 1) | ((byte >>> bit) & 1);
      bits++;
      const index = code - first[bits]!;
      if (index >= count[bits]!) continue;
      const symbol = symbols[offset[bits]! + index]!;
      if (symbol === EOS) throw new HpackError('a Huffman-coded string contains EOS');
      out[length++] = symbol;
      code = 0;
      bits = 0;
    }
  }
  // Padding (§5.2): at most 7 bits, the most significant bits of EOS (all ones).
  if (bits > 7 || code !== (1 << bits) - 1) throw new HpackError('a Huffman-coded string ends in padding longer than 7 bits or not all ones');
  return out.toString('latin1', 0, length);
}

// ---- The dynamic table (§2.3.2, §4) ----

/**
 * The dynamic table as a ring: index 0 is the newest entry. Insertion and eviction are O(1); the ring
 * doubles when full, which is bounded since every entry takes at least 32 octets of the table's size.
 */
class DynamicTable {
  private names: string[] = new Array<string>(16).fill('');
  private values: string[] = new Array<string>(16).fill('');
  private newest = -1;
  /** Entries in the table. */
  length = 0;
  /** §4.1 size of the entries. */
  private size = 0;

  constructor(private maxSize: number) {}

  /** Name of entry `i` (0 = newest); `i` must be below length. */
  nameAt(i: number): string {
    return this.names[(this.newest - i) & (this.names.length - 1)]!;
  }

  /** Value of entry `i` (0 = newest); `i` must be below length. */
  valueAt(i: number): string {
    return this.values[(this.newest - i) & (this.values.length - 1)]!;
  }

  /** Adds an entry, evicting the oldest until it fits; one larger than the whole table empties it (§4.4). */
  add(name: string, value: string): void {
    const size = name.length + value.length + ENTRY_OVERHEAD;
    while (this.length > 0 && this.size + size > this.maxSize) this.evictOldest();
    if (size > this.maxSize) return;
    if (this.length === this.names.length) this.grow();
    this.newest = (this.newest + 1) & (this.names.length - 1);
    this.names[this.newest] = name;
    this.values[this.newest] = value;
    this.length++;
    this.size += size;
  }

  /** A new maximum size (§4.3): entries are evicted until the table fits. */
  resize(maxSize: number): void {
    this.maxSize = maxSize;
    while (this.size > maxSize) this.evictOldest();
  }

  private evictOldest(): void {
    const slot = (this.newest - this.length + 1) & (this.names.length - 1);
    this.size -= this.names[slot]!.length + this.values[slot]!.length + ENTRY_OVERHEAD;
    // Dropped so that the strings can be collected.
    this.names[slot] = '';
    this.values[slot] = '';
    this.length--;
  }

  /** Doubles the ring, oldest entry first at slot 0. */
  private grow(): void {
    const names = new Array<string>(2 * this.names.length).fill('');
    const values = new Array<string>(2 * this.values.length).fill('');
    for (let i = 0; i < this.length; i++) {
      names[this.length - 1 - i] = this.nameAt(i);
      values[this.length - 1 - i] = this.valueAt(i);
    }
    this.names = names;
    this.values = values;
    this.newest = this.length - 1;
  }
}

// ---- Decoding (§5, §6) ----

/** Decodes the header blocks of one HTTP/2 connection, in order (the dynamic table is shared by them). */
export class HpackDecoder {
  private readonly table: DynamicTable;
  private readonly maxTableSize: number;
  private block: Buffer = Buffer.alloc(0);
  private pos = 0;
  private failed = false;
  // The field the last representation decoded, so that a field not kept needs no tuple.
  private name = '';
  private value = '';

  /** maxTableSize: the SETTINGS_HEADER_TABLE_SIZE we advertise (default 4096). */
  constructor(maxTableSize = 4096) {
    if (!Number.isSafeInteger(maxTableSize) || maxTableSize < 0) throw new RangeError(`HPACK table size must be a non-negative integer, not ${maxTableSize}`);
    this.maxTableSize = maxTableSize;
    this.table = new DynamicTable(maxTableSize);
  }

  /**
   * Decodes one complete header block. Fields are collected while their RFC 9113 §6.5.2 size (name + value
   * octets + 32 each) stays within maxListBytes; beyond it, decoding continues to the end (the dynamic
   * table must stay in sync with the peer's encoder) but no more fields are kept and tooLarge is true.
   * Throws HpackError on anything malformed; after a throw the decoder is unusable (connection error).
   */
  decode(block: Buffer, maxListBytes: number): { fields: [name: string, value: string][]; tooLarge: boolean } {
    if (this.failed) throw new HpackError('the header compression state was lost to an earlier malformed block');
    this.failed = true;
    this.block = block;
    this.pos = 0;
    try {
      this.readSizeUpdates();
      const result = this.readFields(maxListBytes);
      this.failed = false;
      return result;
    } finally {
      this.block = Buffer.alloc(0);
    }
  }

  /** §4.2: size updates come first in a block, at most two (the smallest and the final size). */
  private readSizeUpdates(): void {
    for (let updates = 0; this.pos < this.block.length && (this.block[this.pos]! & 0xe0) === 0x20; updates++) {
      if (updates === 2) throw new HpackError('a header block starts with more than two dynamic table size updates');
      const size = this.readInteger(5);
      if (size > this.maxTableSize) throw new HpackError(`dynamic table size update to ${size} octets, above the ${this.maxTableSize} advertised`);
      this.table.resize(size);
    }
  }

  private readFields(maxListBytes: number): { fields: [name: string, value: string][]; tooLarge: boolean } {
    const fields: [name: string, value: string][] = [];
    let listBytes = 0;
    let tooLarge = false;
    while (this.pos < this.block.length) {
      this.readField();
      const size = this.name.length + this.value.length + ENTRY_OVERHEAD;
      if (!tooLarge && listBytes + size <= maxListBytes) {
        fields.push([this.name, this.value]);
        listBytes += size;
      } else {
        tooLarge = true;
      }
    }
    return { fields, tooLarge };
  }

  /** One field representation (§6) into this.name and this.value. */
  private readField(): void {
    const first = this.block[this.pos]!;
    if (first & 0x80) {
      // §6.1 indexed field
      const index = this.readInteger(7);
      this.name = this.nameAt(index);
      this.value = this.valueAt(index);
    } else if (first & 0x40) {
      // §6.2.1 literal with incremental indexing
      this.readLiteral(6);
      this.table.add(this.name, this.value);
    } else if (first & 0x20) {
      throw new HpackError('a dynamic table size update after a header field');
    } else {
      // §6.2.2 without indexing, §6.2.3 never indexed: the same to a decoder
      this.readLiteral(4);
    }
  }

  /** §6.2: a name index on `prefixBits` bits (0: a literal name follows), then the value. */
  private readLiteral(prefixBits: number): void {
    const index = this.readInteger(prefixBits);
    this.name = index === 0 ? this.readString() : this.nameAt(index);
    this.value = this.readString();
  }

  /** §5.2: a string literal, Huffman-coded or raw. */
  private readString(): string {
    if (this.pos >= this.block.length) throw new HpackError('a header block ends before a string');
    const huffman = this.block[this.pos]! & 0x80;
    const length = this.readInteger(7);
    const start = this.pos;
    if (length > this.block.length - start) throw new HpackError(`a string of ${length} octets runs past the end of the header block`);
    this.pos = start + length;
    return huffman ? decodeHuffman(this.block, start, this.pos) : this.block.toString('latin1', start, this.pos);
  }

  /** §5.1: an integer on the low `prefixBits` bits of the current byte and what continues it. */
  private readInteger(prefixBits: number): number {
    const block = this.block;
    if (this.pos >= block.length) throw new HpackError('a header block ends before an integer');
    const max = (1 << prefixBits) - 1;
    let value = block[this.pos++]! & max;
    if (value < max) return value;
    for (let shift = 0; shift < 7 * MAX_INTEGER_CONTINUATIONS; shift += 7) {
      if (this.pos >= block.length) throw new HpackError('a header block ends inside an integer');
      const byte = block[this.pos++]!;
      value += (byte & 0x7f) * 2 ** shift;
      if ((byte & 0x80) === 0) return value;
    }
    throw new HpackError(`an integer of more than ${MAX_INTEGER_CONTINUATIONS} continuation bytes`);
  }

  private nameAt(index: number): string {
    this.checkIndex(index);
    return index <= STATIC_TABLE.length ? STATIC_TABLE[index - 1]![0] : this.table.nameAt(index - STATIC_TABLE.length - 1);
  }

  private valueAt(index: number): string {
    return index <= STATIC_TABLE.length ? STATIC_TABLE[index - 1]![1] : this.table.valueAt(index - STATIC_TABLE.length - 1);
  }

  /** §2.3.3: indices start at 1 and end at the dynamic table's oldest entry. */
  private checkIndex(index: number): void {
    if (index === 0) throw new HpackError('header field index 0');
    if (index > STATIC_TABLE.length + this.table.length) {
      throw new HpackError(`header field index ${index} beyond the ${STATIC_TABLE.length + this.table.length} entries of the tables`);
    }
  }
}

// ---- Encoding ----

/** The static table by name: the first index with that name, and the index of each (name, value). */
const STATIC_BY_NAME = new Map<string, { nameIndex: number; byValue: Map<string, number> }>();
STATIC_TABLE.forEach(([name, value], i) => {
  let entry = STATIC_BY_NAME.get(name);
  if (!entry) STATIC_BY_NAME.set(name, (entry = { nameIndex: i + 1, byValue: new Map() }));
  entry.byValue.set(value, i + 1);
});

/** Octets of `value` as a §5.1 integer on a `prefixBits`-bit prefix. */
function integerLength(value: number, prefixBits: number): number {
  const max = (1 << prefixBits) - 1;
  if (value < max) return 1;
  let length = 2;
  for (let rest = value - max; rest >= 0x80; rest = Math.floor(rest / 0x80)) length++;
  return length;
}

/** Writes `value` as a §5.1 integer, the prefix's high bits set to `flags`; returns the next offset. */
function writeInteger(out: Buffer, pos: number, value: number, prefixBits: number, flags: number): number {
  const max = (1 << prefixBits) - 1;
  if (value < max) {
    out[pos++] = flags | value;
    return pos;
  }
  out[pos++] = flags | max;
  let rest = value - max;
  for (; rest >= 0x80; rest = Math.floor(rest / 0x80)) out[pos++] = 0x80 | (rest & 0x7f);
  out[pos++] = rest;
  return pos;
}

/** Writes a raw (not Huffman-coded) string literal; returns the next offset. */
function writeString(out: Buffer, pos: number, s: string): number {
  pos = writeInteger(out, pos, s.length, 7, 0);
  return pos + out.write(s, pos, 'latin1');
}

/** How a field goes out: a static index (> 0), a literal with a static name (-name index), or all literal (0). */
function staticReference(name: string, value: string): number {
  const entry = STATIC_BY_NAME.get(name);
  if (!entry) return 0;
  return entry.byValue.get(value) ?? -entry.nameIndex;
}

/**
 * One header block for `fields`, stateless (never touches the peer's dynamic table, so any
 * SETTINGS_HEADER_TABLE_SIZE the peer sets is fine): a static-table index when name and value match an
 * entry, else a literal without indexing (name from the static table when it has it), no Huffman.
 */
export function encodeHeaderBlock(fields: ReadonlyArray<readonly [string, string]>): Buffer {
  const references = new Int32Array(fields.length);
  let length = 0;
  fields.forEach(([name, value], i) => {
    const reference = (references[i] = staticReference(name, value));
    if (reference > 0) length += integerLength(reference, 7);
    else length += integerLength(-reference, 4) + (reference === 0 ? integerLength(name.length, 7) + name.length : 0) + integerLength(value.length, 7) + value.length;
  });
  const out = Buffer.allocUnsafe(length);
  let pos = 0;
  fields.forEach(([name, value], i) => {
    const reference = references[i]!;
    if (reference > 0) {
      pos = writeInteger(out, pos, reference, 7, 0x80); // §6.1
      return;
    }
    pos = writeInteger(out, pos, -reference, 4, 0x00); // §6.2.2, without indexing
    if (reference === 0) pos = writeString(out, pos, name);
    pos = writeString(out, pos, value);
  });
  return out;
}
