/**
 * A synchronous, push-driven tar parser for image layers: ustar, PAX (local and global records) and
 * GNU long names, with base-256 numbers. It hands each entry's header and data to a sink in order
 * and never buffers file data (data chunks are views of the input).
 *
 * Why not tar-stream's parser: it decodes PAX values as UTF-8, which corrupts binary xattrs such as
 * security.capability, and it wraps every entry in its own stream object. This parser runs inside the
 * unpack worker, called with decompressed chunks, and keeps every PAX value as raw bytes.
 */

export type TarEntryType = 'file' | 'hardlink' | 'symlink' | 'char' | 'block' | 'dir' | 'fifo';

export interface TarHeader {
  name: string;
  type: TarEntryType;
  /** Link target for symlinks and hardlinks. */
  linkname: string;
  /** Permission bits including setuid/setgid/sticky. */
  mode: number;
  uid: number;
  gid: number;
  size: number;
  /** Seconds since the epoch (fractional from PAX). */
  mtime: number;
  atime?: number;
  devmajor: number;
  devminor: number;
  /** Extended attributes from PAX `SCHILY.xattr.*` records, raw bytes. */
  xattrs?: Map<string, Buffer>;
}

export interface TarSink {
  entry(header: TarHeader): void;
  /** File data for the current entry (only for type 'file'). */
  data(chunk: Buffer): void;
  endEntry(): void;
}

/** A malformed or unsupported archive. */
export class TarFormatError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TarFormatError';
  }
}

const BLOCK = 512;
const MAX_META_SIZE = 1 << 20;

type State = 'header' | 'data' | 'meta' | 'padding' | 'end';

function cstring(buf: Buffer, start: number, length: number): string {
  let end = start;
  const limit = start + length;
  while (end < limit && buf[end] !== 0) end++;
  return buf.toString('utf8', start, end);
}

/** Reads an octal (or GNU base-256) number field. */
function number(buf: Buffer, start: number, length: number): number {
  if (buf[start]! & 0x80) {
    // base-256: big-endian two's complement, first byte's top bit is the marker
    let value = buf[start]! & 0x3f;
    if (buf[start]! & 0x40) throw new TarFormatError('negative number in tar header');
    for (let i = start + 1; i < start + length; i++) value = value * 256 + buf[i]!;
    return value;
  }
  let value = 0;
  let i = start;
  const end = start + length;
  while (i < end && (buf[i] === 0x20 || buf[i] === 0)) i++;
  for (; i < end; i++) {
    const c = buf[i]!;
    if (c === 0 || c === 0x20) break;
    if (c < 0x30 || c > 0x37) throw new TarFormatError('invalid number in tar header');
    value = value * 8 + (c - 0x30);
  }
  return value;
}

function checksumOk(block: Buffer): boolean {
  const stored = number(block, 148, 8);
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const b = i >= 148 && i < 156 ? 0x20 : block[i]!;
    unsigned += b;
    signed += b > 127 ? b - 256 : b;
  }
  return stored === unsigned || stored === signed;
}

function isZeroBlock(block: Buffer): boolean {
  for (let i = 0; i < BLOCK; i++) if (block[i] !== 0) return false;
  return true;
}

/** Parses PAX records (`<len> <key>=<value>\n`), keeping values as raw bytes. */
export function parsePax(buf: Buffer): Map<string, Buffer> {
  const records = new Map<string, Buffer>();
  let pos = 0;
  while (pos < buf.length) {
    if (buf[pos] === 0) break;
    const space = buf.indexOf(0x20, pos);
    if (space < 0) throw new TarFormatError('malformed PAX record');
    const len = parseInt(buf.toString('ascii', pos, space), 10);
    if (!Number.isInteger(len) || len <= 0 || pos + len > buf.length) throw new TarFormatError('malformed PAX record length');
    const eq = buf.indexOf(0x3d, space + 1);
    if (eq < 0 || eq >= pos + len) throw new TarFormatError('malformed PAX record');
    const key = buf.toString('utf8', space + 1, eq);
    records.set(key, buf.subarray(eq + 1, pos + len - 1));
    pos += len;
  }
  return records;
}

export class TarReader {
  private state: State = 'header';
  private pending: Buffer[] = [];
  private pendingLength = 0;
  private remaining = 0;
  private paddingLeft = 0;
  private metaType = '';
  private metaSize = 0;
  private zeroBlocks = 0;
  private longName?: string;
  private longLink?: string;
  private pax?: Map<string, Buffer>;
  private globalPax?: Map<string, Buffer>;
  private inEntry = false;
  /** The current entry's data is skipped (GNU dumpdir listings). */
  private discard = false;

  constructor(private readonly sink: TarSink) {}

  /** True once the end-of-archive marker was read. */
  get ended(): boolean {
    return this.state === 'end';
  }

  /** Feeds more archive bytes. */
  push(chunk: Buffer): void {
    let pos = 0;
    while (pos < chunk.length && this.state !== 'end') {
      switch (this.state) {
        case 'data': {
          const n = Math.min(this.remaining, chunk.length - pos);
          if (n > 0 && !this.discard) this.sink.data(chunk.subarray(pos, pos + n));
          pos += n;
          this.remaining -= n;
          if (this.remaining === 0) this.finishData();
          break;
        }
        case 'padding': {
          const n = Math.min(this.paddingLeft, chunk.length - pos);
          pos += n;
          this.paddingLeft -= n;
          if (this.paddingLeft === 0) this.state = 'header';
          break;
        }
        case 'header':
        case 'meta': {
          const need = (this.state === 'header' ? BLOCK : this.metaSize) - this.pendingLength;
          const n = Math.min(need, chunk.length - pos);
          this.pending.push(chunk.subarray(pos, pos + n));
          this.pendingLength += n;
          pos += n;
          if (n === need) {
            const block = this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending);
            this.pending = [];
            this.pendingLength = 0;
            if (this.state === 'header') this.onHeader(block);
            else this.onMeta(block);
          }
          break;
        }
      }
    }
  }

  /** Signals the end of input; throws if it ended inside an entry. */
  end(): void {
    if (this.state === 'end') return;
    if (this.state === 'header' && this.pendingLength === 0 && !this.longName && !this.longLink && !this.pax) return;
    throw new TarFormatError('unexpected end of layer data inside a tar entry');
  }

  private finishData(): void {
    const padding = (BLOCK - (this.metaSize % BLOCK)) % BLOCK;
    if (this.inEntry) {
      this.inEntry = false;
      this.sink.endEntry();
    }
    this.paddingLeft = padding;
    this.state = padding > 0 ? 'padding' : 'header';
  }

  private onMeta(buf: Buffer): void {
    switch (this.metaType) {
      case 'L':
        this.longName = cstring(buf, 0, buf.length);
        break;
      case 'K':
        this.longLink = cstring(buf, 0, buf.length);
        break;
      case 'x':
        this.pax = new Map([...(this.pax ?? []), ...parsePax(buf)]);
        break;
      case 'g':
        this.globalPax = new Map([...(this.globalPax ?? []), ...parsePax(buf)]);
        break;
    }
    const padding = (BLOCK - (this.metaSize % BLOCK)) % BLOCK;
    this.paddingLeft = padding;
    this.state = padding > 0 ? 'padding' : 'header';
  }

  private onHeader(block: Buffer): void {
    if (isZeroBlock(block)) {
      this.zeroBlocks++;
      if (this.zeroBlocks >= 2) this.state = 'end';
      return;
    }
    if (this.zeroBlocks > 0) throw new TarFormatError('data after an end-of-archive block');
    if (!checksumOk(block)) throw new TarFormatError('invalid tar header checksum');
    const typeflag = block[156] === 0 ? '0' : String.fromCharCode(block[156]!);
    const size = number(block, 124, 12);

    if (typeflag === 'L' || typeflag === 'K' || typeflag === 'x' || typeflag === 'g') {
      if (size > MAX_META_SIZE) throw new TarFormatError(`tar metadata entry of ${size} bytes is too large`);
      this.metaType = typeflag;
      this.metaSize = size;
      this.state = size > 0 ? 'meta' : 'header';
      if (size === 0) this.onMeta(Buffer.alloc(0));
      return;
    }

    const magic = block.toString('latin1', 257, 263);
    let name = cstring(block, 0, 100);
    if (magic === 'ustar\0') {
      const prefix = cstring(block, 345, 155);
      if (prefix) name = `${prefix}/${name}`;
    }
    let linkname = cstring(block, 157, 100);
    const header: TarHeader = {
      name,
      type: 'file',
      linkname,
      mode: number(block, 100, 8) & 0o7777,
      uid: number(block, 108, 8),
      gid: number(block, 116, 8),
      size,
      mtime: number(block, 136, 12),
      devmajor: number(block, 329, 8),
      devminor: number(block, 337, 8),
    };
    switch (typeflag) {
      case '0':
      case '7':
        header.type = name.endsWith('/') ? 'dir' : 'file';
        break;
      case '1':
        header.type = 'hardlink';
        break;
      case '2':
        header.type = 'symlink';
        break;
      case '3':
        header.type = 'char';
        break;
      case '4':
        header.type = 'block';
        break;
      case '5':
      case 'D':
        header.type = 'dir';
        break;
      case '6':
        header.type = 'fifo';
        break;
      case 'S':
        throw new TarFormatError(`sparse file "${name}" is not supported in image layers`);
      default:
        throw new TarFormatError(`unsupported tar entry type "${typeflag}" for "${name}"`);
    }
    if (this.longName !== undefined) header.name = this.longName;
    if (this.longLink !== undefined) linkname = header.linkname = this.longLink;
    this.longName = this.longLink = undefined;
    const pax = this.globalPax || this.pax ? new Map([...(this.globalPax ?? []), ...(this.pax ?? [])]) : undefined;
    this.pax = undefined;
    if (pax) this.applyPax(header, pax);

    // Only regular files carry data; other types' size field is ignored (as GNU tar does for links).
    const dataSize = header.type === 'file' || typeflag === 'D' ? header.size : 0;
    this.discard = header.type !== 'file';
    if (header.type !== 'file') header.size = 0;
    this.inEntry = true;
    this.sink.entry(header);
    this.metaSize = dataSize;
    this.remaining = dataSize;
    if (dataSize === 0) this.finishData();
    else this.state = 'data';
  }

  private applyPax(header: TarHeader, pax: Map<string, Buffer>): void {
    for (const [key, value] of pax) {
      switch (key) {
        case 'path':
          header.name = value.toString('utf8');
          break;
        case 'linkpath':
          header.linkname = value.toString('utf8');
          break;
        case 'size':
          header.size = paxNumber(key, value);
          break;
        case 'uid':
          header.uid = paxNumber(key, value);
          break;
        case 'gid':
          header.gid = paxNumber(key, value);
          break;
        case 'mtime':
          header.mtime = paxTime(value);
          break;
        case 'atime':
          header.atime = paxTime(value);
          break;
        default:
          if (key.startsWith('SCHILY.xattr.')) {
            header.xattrs ??= new Map();
            header.xattrs.set(key.slice('SCHILY.xattr.'.length), Buffer.from(value));
          } else if (key.startsWith('GNU.sparse.')) {
            throw new TarFormatError(`sparse file "${header.name}" is not supported in image layers`);
          }
      }
    }
  }
}

function paxNumber(key: string, value: Buffer): number {
  const text = value.toString('ascii');
  if (!/^\d+$/.test(text)) throw new TarFormatError(`invalid PAX ${key} "${text}"`);
  return Number(text);
}

function paxTime(value: Buffer): number {
  const n = Number(value.toString('ascii'));
  if (!Number.isFinite(n)) throw new TarFormatError(`invalid PAX time "${value.toString('ascii')}"`);
  return n;
}
