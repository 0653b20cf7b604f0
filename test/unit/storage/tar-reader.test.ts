import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, mkdirSync, symlinkSync, rmSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TarReader, TarFormatError, type TarHeader } from '../../../src/storage/tar-reader.js';
import { normaliseEntryName, UnsafeEntryError } from '../../../src/storage/extract.js';
import { buildTar } from '../../helpers/image-builder.js';
import { chainIds } from '../../../src/storage/layers.js';

interface Seen {
  header: TarHeader;
  data: string;
}

/** Parses an archive, feeding it in chunks of `chunk` bytes. */
function parse(tar: Buffer, chunk = tar.length): Seen[] {
  const seen: Seen[] = [];
  const reader = new TarReader({
    entry: (header) => seen.push({ header, data: '' }),
    data: (c) => (seen[seen.length - 1]!.data += c.toString()),
    endEntry: () => {},
  });
  for (let i = 0; i < tar.length; i += chunk) reader.push(tar.subarray(i, i + chunk));
  reader.end();
  return seen;
}

describe('tar reader', () => {
  it('reads every entry type, PAX and GNU long names, big ids, fractional times and binary xattrs, in any chunking', () => {
    const long = 'p/' + 'x'.repeat(200);
    const tar = buildTar([
      { type: 'dir', path: 'p', mode: 0o2755 },
      { path: long, content: 'hello', mode: 0o4711, uid: 3_000_000_000, mtime: 1.5 },
      { type: 'symlink', path: 'p/s', target: 't'.repeat(150) },
      { type: 'hardlink', path: 'p/h', target: long },
      { type: 'char', path: 'p/c', major: 4, minor: 5 },
      { type: 'block', path: 'p/b', major: 8, minor: 1 },
      { type: 'fifo', path: 'p/f' },
      { path: 'p/x', content: 'y', xattrs: { 'security.capability': Buffer.from([0, 0xff, 0x80, 1]) } },
    ]);
    for (const chunk of [tar.length, 511, 100, 7, 1]) {
      const seen = parse(tar, chunk);
      assert.deepEqual(seen.map((s) => s.header.type), ['dir', 'file', 'symlink', 'hardlink', 'char', 'block', 'fifo', 'file']);
      assert.equal(seen[1]!.header.name, long);
      assert.equal(seen[1]!.data, 'hello');
      assert.equal(seen[1]!.header.mode, 0o4711);
      assert.equal(seen[1]!.header.uid, 3_000_000_000);
      assert.equal(seen[1]!.header.mtime, 1.5);
      assert.equal(seen[2]!.header.linkname, 't'.repeat(150));
      assert.equal(seen[3]!.header.linkname, long);
      assert.deepEqual([seen[4]!.header.devmajor, seen[4]!.header.devminor], [4, 5]);
      assert.deepEqual(seen[7]!.header.xattrs!.get('security.capability'), Buffer.from([0, 0xff, 0x80, 1]));
    }
    const gnu = parse(buildTar([{ path: long, content: 'g' }, { type: 'symlink', path: 'l', target: 'z'.repeat(120) }], { longNames: 'gnu' }));
    assert.equal(gnu[0]!.header.name, long);
    assert.equal(gnu[1]!.header.linkname, 'z'.repeat(120));
  });

  it('reads what GNU tar writes (gnu and posix formats)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'stove-tar-'));
    try {
      mkdirSync(join(dir, 'src', 'sub'), { recursive: true });
      writeFileSync(join(dir, 'src', 'sub', 'f'), 'data');
      writeFileSync(join(dir, 'src', 'n'.repeat(180)), 'long');
      symlinkSync('sub/f', join(dir, 'src', 'link'));
      for (const format of ['gnu', 'posix']) {
        execFileSync('tar', ['--format', format, '-cf', join(dir, `${format}.tar`), '-C', join(dir, 'src'), '.']);
        const seen = parse(readFileSync(join(dir, `${format}.tar`)), 1000);
        const byName = new Map(seen.map((s) => [s.header.name.replace(/^\.\//, ''), s]));
        assert.equal(byName.get('sub/f')?.data, 'data', format);
        assert.equal(byName.get('n'.repeat(180))?.data, 'long', format);
        assert.equal(byName.get('link')?.header.linkname, 'sub/f', format);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects corrupt headers, truncated archives and sparse files', () => {
    const tar = buildTar([{ path: 'a', content: 'abc' }]);
    const corrupt = Buffer.from(tar);
    corrupt[10] = 0x41;
    assert.throws(() => parse(corrupt), TarFormatError);
    assert.throws(() => parse(tar.subarray(0, 600)), /unexpected end of layer data/);
    const sparse = Buffer.from(buildTar([{ path: 's', content: '' }]));
    sparse[156] = 'S'.charCodeAt(0);
    let sum = 0;
    sparse.fill(0x20, 148, 156);
    for (let i = 0; i < 512; i++) sum += sparse[i]!;
    sparse.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 'ascii');
    assert.throws(() => parse(sparse), /sparse file "s" is not supported/);
  });

  it('normalises entry names and refuses ones that climb out', () => {
    assert.equal(normaliseEntryName('./a/b/'), 'a/b');
    assert.equal(normaliseEntryName('/etc/passwd'), 'etc/passwd');
    assert.equal(normaliseEntryName('a/../b'), 'b');
    assert.equal(normaliseEntryName('./'), '');
    for (const name of ['..', '../x', 'a/../../x', '/../x']) assert.throws(() => normaliseEntryName(name), UnsafeEntryError, name);
  });

  it('computes chain IDs', () => {
    const a = 'sha256:' + 'a'.repeat(64);
    const b = 'sha256:' + 'b'.repeat(64);
    const [c0, c1] = chainIds([a, b]);
    assert.equal(c0, a);
    assert.equal(c1, 'sha256:' + require256(`${a} ${b}`));
  });
});

function require256(s: string): string {
  return execFileSync('sha256sum', { input: s, encoding: 'utf8' }).split(' ')[0]!;
}
