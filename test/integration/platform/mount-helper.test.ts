/**
 * The mount helper (dist/libexec/stove-mount-helper) against the real kernel: tmpfs and overlay mounts,
 * unmounts, pinned network namespaces with loopback up, device nodes and fifos, errors with their
 * errno, a helper that dies between calls, and the util-linux (coreutils) fallback giving the same results.
 */
import assert from 'node:assert/strict';
import { lstat, mkdir, mkdtemp, open, readFile, readlink, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { DEFAULT_MOUNT_HELPER, MountHelper, SyscallError, setMountHelper } from '../../../src/platform/mount-helper.js';
import { makeNode } from '../../../src/platform/mknod.js';
import { isMountPoint, mount, unmount } from '../../../src/platform/mount.js';
import { isNetns } from '../../../src/network/netns.js';
import { pidExists } from '../../helpers/process.js';
import { eventually } from '../../helpers/wait.js';

const MS_NOSUID = 0x2;

/** Helpers this process started. */
async function helperPids(): Promise<number[]> {
  const r = await execa('pgrep', ['-P', String(process.pid), '-f', 'stove-mount-helper'], { reject: false });
  return r.stdout.split('\n').filter(Boolean).map(Number);
}

const MNT_DETACH = 2;

describe('mount helper (real mounts)', function () {
  let dir: string;
  let helper: MountHelper;

  before(function () {
    if (process.getuid?.() !== 0) {
      console.log('    skipped: mounts need root');
      this.skip();
    }
  });

  beforeEach(async function () {
    dir = await mkdtemp(join(tmpdir(), 'stove-mount-helper-'));
    helper = new MountHelper(DEFAULT_MOUNT_HELPER);
  });

  afterEach(async function () {
    setMountHelper(DEFAULT_MOUNT_HELPER);
    for (let i = 0; i < 3; i++) await execa('umount', ['-R', '-l', dir], { reject: false });
    for (const name of ['ns']) await execa('umount', [join(dir, name)], { reject: false });
    await rm(dir, { recursive: true, force: true });
  });

  it('mounts and unmounts a tmpfs with flags and data', async function () {
    const target = join(dir, 'shm');
    await mkdir(target);
    await helper.mount('shm', target, 'tmpfs', MS_NOSUID, 'mode=1777,size=65536');
    assert.ok(await isMountPoint(target));
    const line = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').find((l) => l.split(' ')[4] === target)!;
    assert.match(line, /\bnosuid\b/);
    assert.match(line, /size=64k/);
    assert.equal((await stat(target)).mode & 0o7777, 0o1777);
    await helper.umount(target, 0);
    assert.ok(!(await isMountPoint(target)));
  });

  it('resolves overlay lower dirs relative to the working directory given', async function () {
    for (const d of ['base/layer', 'upper', 'work', 'merged']) await mkdir(join(dir, d), { recursive: true });
    await writeFile(join(dir, 'base/layer/file'), 'from the layer');
    await helper.mount('overlay', join(dir, 'merged'), 'overlay', 0, `lowerdir=layer,upperdir=${join(dir, 'upper')},workdir=${join(dir, 'work')}`, join(dir, 'base'));
    assert.equal(await readFile(join(dir, 'merged/file'), 'utf8'), 'from the layer');
    await helper.umount(join(dir, 'merged'), MNT_DETACH);
    assert.ok(!(await isMountPoint(join(dir, 'merged'))));
  });

  it('makes idmapped bind mounts of relative sources, all or nothing, with no child left', async function () {
    for (const d of ['base/a', 'base/b', 'ta', 'tb']) await mkdir(join(dir, d), { recursive: true });
    await writeFile(join(dir, 'base/a/file'), 'a');
    await execa('chown', ['1000:1001', join(dir, 'base/a/file')]);
    const map = (host: number) => `0 ${host} 65536\n`;
    await helper.idmapMounts(map(700000), map(800000), join(dir, 'base'), ['a', 'b'], [join(dir, 'ta'), join(dir, 'tb')]);
    try {
      const st = await stat(join(dir, 'ta/file'));
      assert.deepEqual([st.uid, st.gid], [701000, 801001], 'owners seen through the mount are mapped');
      const source = await stat(join(dir, 'base/a/file'));
      assert.deepEqual([source.uid, source.gid], [1000, 1001], 'the source keeps its owners');
      assert.ok(await isMountPoint(join(dir, 'tb')));
      const line = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').find((l) => l.split(' ')[4] === join(dir, 'ta'))!;
      assert.match(line, /\bidmapped\b/);
    } finally {
      for (const t of ['ta', 'tb']) await helper.umount(join(dir, t), MNT_DETACH);
    }
    // A missing second source: the first one attached is detached again.
    await assert.rejects(helper.idmapMounts(map(700000), map(700000), join(dir, 'base'), ['a', 'missing'], [join(dir, 'ta'), join(dir, 'tb')]), (err: unknown) => err instanceof SyscallError && err.errno === 2);
    assert.ok(!(await isMountPoint(join(dir, 'ta'))));
    // A map the kernel refuses (a range wrapping past 2^32) fails before anything is mounted.
    await assert.rejects(helper.idmapMounts('0 4294967295 2\n', map(700000), join(dir, 'base'), ['a'], [join(dir, 'ta')]), (err: unknown) => err instanceof SyscallError && err.errno === 22);
    assert.ok(!(await isMountPoint(join(dir, 'ta'))));
    await eventually('no user namespace child of the helper is left', async () => (await execa('pgrep', ['-P', String((await helperPids())[0] ?? 0)], { reject: false })).stdout === '', 5000);
  });

  it('reports the errno of a failed call and goes on serving', async function () {
    await assert.rejects(helper.mount('x', join(dir, 'missing'), 'tmpfs', 0, ''), (err: unknown) => {
      assert.ok(err instanceof SyscallError);
      assert.equal(err.errno, 2);
      assert.match(err.message, /^mount: No such file or directory/);
      return true;
    });
    await assert.rejects(helper.umount(dir, 0), (err: unknown) => err instanceof SyscallError && err.errno === 22);
    await assert.rejects(helper.mount('x', dir, 'no-such-fs', 0, ''), (err: unknown) => err instanceof SyscallError && err.errno === 19);
    const target = join(dir, 't');
    await mkdir(target);
    await helper.mount('t', target, 'tmpfs', 0, '');
    await helper.umount(target, 0);
  });

  it('pins a new network namespace with loopback up', async function () {
    const pin = join(dir, 'ns');
    await (await open(pin, 'wx', 0o444)).close();
    await helper.newNetns(pin);
    assert.ok(await isNetns(pin));
    const link = await execa('nsenter', [`--net=${pin}`, 'ip', '-o', 'link', 'show']);
    assert.match(link.stdout, /\blo:.*<LOOPBACK,UP,LOWER_UP>/);
    assert.ok(!/eth|veth|br-/.test(link.stdout), 'a fresh namespace has only lo');
    for (const pid of await helperPids()) {
      assert.equal(await readlink(`/proc/${pid}/ns/net`), await readlink('/proc/self/ns/net'), 'the helper stays in its own namespace');
    }
    await helper.umount(pin, 0);
    assert.ok(!(await isNetns(pin)));
  });

  it('fails a pin on a missing file, leaving nothing', async function () {
    const pin = join(dir, 'absent');
    await assert.rejects(helper.newNetns(pin), (err: unknown) => err instanceof SyscallError && err.errno === 2);
    await assert.rejects(stat(pin), { code: 'ENOENT' });
  });

  it('starts a new helper after the old one died', async function () {
    const target = join(dir, 't');
    await mkdir(target);
    await helper.mount('t', target, 'tmpfs', 0, '');
    const pids = await helperPids();
    assert.ok(pids.length >= 1, 'the helper runs as a child of this process');
    for (const pid of pids) process.kill(Number(pid), 'SIGKILL');
    // Gone means reaped (a zombie still answers signal 0): by then this process has seen its exit.
    await eventually('the killed helper to be reaped', () => pids.every((pid) => !pidExists(pid)), 10_000);
    await helper.umount(target, 0);
    assert.ok(!(await isMountPoint(target)));
  });

  for (const via of ['helper', 'util-linux'] as const) {
    it(`mount() and unmount() work through the ${via}`, async function () {
      setMountHelper(via === 'helper' ? DEFAULT_MOUNT_HELPER : null);
      const target = join(dir, 'shm');
      await mkdir(target);
      await mount({ type: 'tmpfs', source: 'shm', target, options: ['nosuid', 'nodev', 'noexec', 'mode=1777', 'size=65536'] });
      assert.ok(await isMountPoint(target));
      await assert.rejects(mount({ type: 'tmpfs', source: 'shm', target: join(dir, 'missing') }), /mount tmpfs on .*missing failed: /);
      await unmount(target);
      assert.ok(!(await isMountPoint(target)));
      await unmount(target); // not mounted: fine
      await unmount(join(dir, 'missing')); // missing: fine
    });
  }

  for (const via of ['helper', 'coreutils'] as const) {
    it(`makes device nodes and fifos with exactly the mode asked for through the ${via}`, async function () {
      setMountHelper(via === 'helper' ? DEFAULT_MOUNT_HELPER : null);
      const umask = process.umask(0o077); // would take bits away if it applied
      try {
        await makeNode(join(dir, 'null'), { type: 'c', mode: 0o666, major: 1, minor: 3 });
        await makeNode(join(dir, 'loop'), { type: 'b', mode: 0o640, major: 7, minor: 5 });
        await makeNode(join(dir, 'pipe'), { type: 'p', mode: 0o644, major: 0, minor: 0 });
        await makeNode(join(dir, 'whiteout'), { type: 'c', mode: 0, major: 0, minor: 0 });
      } finally {
        process.umask(umask);
      }
      const nul = await lstat(join(dir, 'null'));
      assert.ok(nul.isCharacterDevice());
      assert.deepEqual([nul.mode & 0o7777, nul.rdev], [0o666, (1 << 8) | 3]);
      const loop = await lstat(join(dir, 'loop'));
      assert.ok(loop.isBlockDevice());
      assert.deepEqual([loop.mode & 0o7777, loop.rdev], [0o640, (7 << 8) | 5]);
      const pipe = await lstat(join(dir, 'pipe'));
      assert.ok(pipe.isFIFO());
      assert.equal(pipe.mode & 0o7777, 0o644);
      const whiteout = await lstat(join(dir, 'whiteout'));
      assert.ok(whiteout.isCharacterDevice() && whiteout.rdev === 0 && (whiteout.mode & 0o7777) === 0);
      await assert.rejects(makeNode(join(dir, 'null'), { type: 'p', mode: 0o600, major: 0, minor: 0 }), (err: NodeJS.ErrnoException) => {
        assert.match(err.message, new RegExp(`^mknod ${join(dir, 'null')}: .*File exists`));
        if (via === 'helper') assert.equal(err.code, 'EEXIST');
        return true;
      });
    });
  }
});
