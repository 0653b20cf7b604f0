/**
 * Checkpoint archives as hostile input: the entry rules the layer unpacker applies to them (names,
 * types, counts), the metadata checks, and where an archive may be.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LayerExtractor, UnsafeEntryError } from '../../../src/storage/extract.js';
import { TarReader } from '../../../src/storage/tar-reader.js';
import {
  ARCHIVE_POLICY,
  ROOTFS_DIFF_POLICY,
  normaliseDeletedPath,
  parseConfigDump,
  parseDeletedFiles,
  parseDumpedProcess,
  readCheckpointMetadata,
  rfc3339Nano,
} from '../../../src/checkpoint/archive.js';
import { checkArchivePath, isArchivePath } from '../../../src/checkpoint/location.js';
import { buildTar, type LayerEntry } from '../../helpers/image-builder.js';
import type { EntryPolicy } from '../../../src/storage/extract.js';

/** Unpacks `entries` as a tar into a fresh dir under `policy`; returns the dir. */
function unpack(dir: string, entries: LayerEntry[], policy: EntryPolicy): void {
  const extractor = new LayerExtractor(dir, { policy, mknod: () => assert.fail('no device may be made') });
  const reader = new TarReader(extractor);
  reader.push(buildTar(entries));
  reader.end();
  extractor.finish();
}

describe('checkpoint archives: entry rules', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stove-ckpt-'));
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it('unpacks regular files and directories, skipping an entry for the root itself', async () => {
    unpack(dir, [{ type: 'dir', path: './', mode: 0o777 }, { path: 'config.dump', content: '{}' }, { type: 'dir', path: 'checkpoint' }, { path: 'checkpoint/inventory.img', content: 'x' }], ARCHIVE_POLICY);
    assert.equal(await readFile(join(dir, 'checkpoint', 'inventory.img'), 'utf8'), 'x');
  });

  const refused: [string, LayerEntry[], EntryPolicy, RegExp][] = [
    ['an absolute name', [{ path: '/etc/passwd', content: 'x' }], ARCHIVE_POLICY, /is an absolute path/],
    ['a name with ..', [{ type: 'dir', path: 'a' }, { path: 'a/../../escape', content: 'x' }], ARCHIVE_POLICY, /points outside the layer/],
    ['a name with .. that stays inside', [{ type: 'dir', path: 'a' }, { path: 'a/../b', content: 'x' }], ARCHIVE_POLICY, /contains "\.\."/],
    ['a symlink in the archive', [{ type: 'symlink', path: 'checkpoint', target: '/etc' }], ARCHIVE_POLICY, /is a symlink/],
    ['a hard link in the archive', [{ path: 'a', content: 'x' }, { type: 'hardlink', path: 'b', target: 'a' }], ARCHIVE_POLICY, /is a hard link/],
    ['a char device in the writable layer', [{ type: 'char', path: 'dev/mem', major: 1, minor: 1 }], ROOTFS_DIFF_POLICY, /is a char device/],
    ['a block device in the writable layer', [{ type: 'block', path: 'sda', major: 8, minor: 0 }], ROOTFS_DIFF_POLICY, /is a block device/],
    ['a FIFO in the writable layer', [{ type: 'fifo', path: 'pipe' }], ROOTFS_DIFF_POLICY, /is a fifo/],
    ['a whiteout name', [{ type: 'whiteout', path: 'etc/passwd' }], ROOTFS_DIFF_POLICY, /whiteout name/],
    ['a file below a symlink pointing out', [{ type: 'symlink', path: 'out', target: '/' }, { path: 'out/etc/shadow', content: 'x' }], ROOTFS_DIFF_POLICY, /through the symlink "out"/],
    ['a file as the root', [{ path: '.', content: 'x' }], ARCHIVE_POLICY, /would replace the root/],
  ];
  for (const [what, entries, policy, message] of refused) {
    it(`refuses ${what}`, () => {
      assert.throws(() => unpack(dir, entries, policy), (err: Error) => err instanceof UnsafeEntryError && message.test(err.message));
    });
  }

  it('keeps symlinks and hard links inside the writable layer, never followed', async () => {
    unpack(dir, [{ type: 'dir', path: 'srv' }, { path: 'srv/a', content: 'a' }, { type: 'symlink', path: 'srv/link', target: '/etc/shadow' }, { type: 'hardlink', path: 'srv/b', target: 'srv/a' }], ROOTFS_DIFF_POLICY);
    assert.equal(await readFile(join(dir, 'srv', 'b'), 'utf8'), 'a');
  });

  it('refuses more entries than the cap', () => {
    const entries: LayerEntry[] = Array.from({ length: 4 }, (_, i) => ({ path: `f${i}`, content: '' }));
    assert.throws(() => unpack(dir, entries, { ...ARCHIVE_POLICY, maxEntries: 3 }), /more than 3 entries/);
  });
});

describe('checkpoint archives: metadata', () => {
  it('reads config.dump as checkpointctl writes it, and refuses one naming no image', () => {
    const dump = parseConfigDump({ id: 'abc', name: 'n', rootfsImageRef: 'sha256:' + '1'.repeat(64), rootfsImageName: 'img:1', createdTime: '2026-01-01T00:00:00Z', restored: false, extra: 1 });
    assert.equal(dump.rootfsImageName, 'img:1');
    assert.equal(dump.restoredTime, '0001-01-01T00:00:00Z');
    assert.throws(() => parseConfigDump({ id: 'abc' }), /names no image/);
    assert.throws(() => parseConfigDump([]), /must be a JSON object/);
    assert.throws(() => parseConfigDump({ rootfsImageName: 'x'.repeat(5000) }), /at most 4096/);
  });

  it('takes the process from spec.dump and checks it', () => {
    assert.deepEqual(parseDumpedProcess({ process: { args: ['sh'], env: ['A=1'], cwd: '/srv', terminal: true } }), { args: ['sh'], env: ['A=1'], cwd: '/srv', terminal: true });
    assert.throws(() => parseDumpedProcess({}), /has no "process"/);
    assert.throws(() => parseDumpedProcess({ process: { args: [] } }), /process.args is empty/);
    assert.throws(() => parseDumpedProcess({ process: { args: ['sh'], cwd: 'rel' } }), /absolute path/);
    assert.throws(() => parseDumpedProcess({ process: { args: [1] } }), /list of at most/);
  });

  it('normalises deleted paths and refuses any that climb or name the root', () => {
    assert.equal(normaliseDeletedPath('/tmp//a/./b'), 'tmp/a/b');
    assert.equal(normaliseDeletedPath('etc/motd'), 'etc/motd');
    assert.throws(() => normaliseDeletedPath('/tmp/../../etc'), /contains "\.\."/);
    assert.throws(() => normaliseDeletedPath('/'), /names the root/);
    assert.throws(() => parseDeletedFiles({ a: 1 }), /list of at most/);
    assert.deepEqual(parseDeletedFiles(undefined), []);
  });

  it('needs CRIU images in an unpacked archive', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'stove-ckpt-'));
    try {
      await writeFile(join(dir, 'config.dump'), JSON.stringify({ rootfsImageName: 'img:1' }));
      await writeFile(join(dir, 'spec.dump'), JSON.stringify({ process: { args: ['sleep', '1'] } }));
      await assert.rejects(readCheckpointMetadata(dir), /holds no CRIU images/);
      await mkdir(join(dir, 'checkpoint'));
      await writeFile(join(dir, 'checkpoint', 'inventory.img'), 'x');
      await writeFile(join(dir, 'deleted.files'), JSON.stringify(['/srv/old']));
      const m = await readCheckpointMetadata(dir);
      assert.deepEqual(m.deleted, ['srv/old']);
      assert.equal(m.hasRootfsDiff, false);
      await writeFile(join(dir, 'spec.dump'), 'x'.repeat(5 * 1024 * 1024));
      await assert.rejects(readCheckpointMetadata(dir), /larger than the 4194304-byte limit/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('writes times as Go does', () => {
    assert.equal(rfc3339Nano(0n), '0001-01-01T00:00:00Z');
    assert.equal(rfc3339Nano(1_700_000_000_123_456_789n), '2023-11-14T22:13:20.123456789Z');
  });
});

describe('checkpoint archives: locations', () => {
  let base: string;
  let allowed: string;
  beforeEach(async () => {
    base = await mkdtemp(join(tmpdir(), 'stove-ckpt-loc-'));
    allowed = join(base, 'checkpoints');
    await mkdir(join(allowed, 'sub'), { recursive: true });
    await mkdir(join(base, 'elsewhere'));
  });
  afterEach(() => rm(base, { recursive: true, force: true }));

  it('accepts a file in an allowed directory or below it', async () => {
    assert.equal(await checkArchivePath(join(allowed, 'a.tar'), [allowed], 'location', 'write'), join(allowed, 'a.tar'));
    assert.equal(await checkArchivePath(join(allowed, 'sub', 'a.tar'), ['/nonexistent', allowed], 'location', 'write'), join(allowed, 'sub', 'a.tar'));
  });

  it('refuses relative paths, .., other directories, symlinked parents leading out, and non-files', async () => {
    const refuse = (path: string, use: 'read' | 'write', message: RegExp) =>
      assert.rejects(checkArchivePath(path, [allowed], 'location', use), (err: Error & { kind?: string }) => err.kind === 'InvalidArgument' && message.test(err.message));
    await refuse('a.tar', 'write', /must be an absolute path/);
    await refuse(`${allowed}/../elsewhere/a.tar`, 'write', /must not contain "\.\."/);
    await refuse(join(base, 'elsewhere', 'a.tar'), 'write', /is outside the directories/);
    await refuse(join(allowed, 'missing', 'a.tar'), 'write', /directory does not exist/);
    await symlink(join(base, 'elsewhere'), join(allowed, 'link'));
    await refuse(join(allowed, 'link', 'a.tar'), 'write', /is outside the directories/);
    await symlink('/etc/passwd', join(allowed, 'passwd.tar'));
    await refuse(join(allowed, 'passwd.tar'), 'read', /is a symbolic link, not a regular file/);
    await refuse(join(allowed, 'sub'), 'write', /is a directory, not a regular file/);
    await refuse(join(allowed, 'none.tar'), 'read', /no such checkpoint archive/);
  });

  it('takes an image that is a path for a checkpoint archive', () => {
    assert.equal(isArchivePath('/var/lib/kubelet/checkpoints/c.tar'), true);
    assert.equal(isArchivePath('registry.test/app:1'), false);
  });
});
