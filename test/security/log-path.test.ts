/**
 * Item 7 of the hardening: a container's CRI log stays inside its pod's log_directory. A log_path with
 * `..` is refused, a symlink below the log directory (to a directory or as the file itself) is never
 * followed, and runtime.log_size_max reaches conmon, which truncates the log at that size.
 */
import assert from 'node:assert/strict';
import { lstat, mkdtemp, readdir, readFile, rename, rm, stat, symlink, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { containerSuite, ContainerWorld, eventually, rejectsWith } from '../integration/container/world.js';

const LOG_SIZE_MAX = 16384;

describe('security: log paths stay in the log directory (real daemon, runc, conmon)', function () {
  this.timeout(60_000);
  const world = new ContainerWorld();
  world.pods.runtimeToml.push(`log_size_max = ${LOG_SIZE_MAX}`);
  let outside = '';

  containerSuite(world, 'log path security tests', {
    scope: 'pods',
    setup: async () => {
      outside = await mkdtemp(join(tmpdir(), 'stove-outside-'));
    },
  });
  after(() => rm(outside, { recursive: true, force: true }));

  it('refuses a log_path that leaves log_directory with INVALID_ARGUMENT and writes nothing there', async () => {
    const pod = await world.pod();
    const escape = join(dirname(pod.config.logDirectory), 'escaped.log');
    await rejectsWith(
      world.create(pod, world.config('sleeper', { logPath: '../escaped.log' })),
      'INVALID_ARGUMENT',
      /log_path "\.\.\/escaped\.log" leaves the sandbox's log_directory/,
    );
    await assert.rejects(lstat(escape), { code: 'ENOENT' });
  });

  it('follows no symlink below log_directory, to a directory or as the file', async () => {
    const pod = await world.pod();
    const dir = pod.config.logDirectory;
    await symlink(outside, join(dir, 'linked-dir'));
    await rejectsWith(world.create(pod, world.config('sleeper', { logPath: 'linked-dir/0.log' })), 'FAILED_PRECONDITION', /"linked-dir".*not a directory|linked-dir.*symbolic/);
    await symlink(join(outside, 'target.log'), join(dir, 'linked.log'));
    await rejectsWith(world.create(pod, world.config('sleeper', { logPath: 'linked.log' })), 'FAILED_PRECONDITION', /linked\.log" is a symbolic link/);
    await writeFile(join(outside, 'existing.log'), 'host file\n');
    await symlink(join(outside, 'existing.log'), join(dir, 'existing.log'));
    await rejectsWith(world.create(pod, world.config('sleeper', { logPath: 'existing.log' })), 'FAILED_PRECONDITION', /symbolic link/);
    assert.deepEqual((await readdir(outside)).sort(), ['existing.log'], 'nothing was created outside');
    assert.equal(await readFile(join(outside, 'existing.log'), 'utf8'), 'host file\n');
    // The refused creates left their symlinks alone and made nothing else in the log directory.
    assert.deepEqual((await readdir(dir)).sort(), ['existing.log', 'linked-dir', 'linked.log']);
  });

  it('makes the new file itself on ReopenContainerLog, so a symlink planted after a rotation is refused', async () => {
    const pod = await world.pod();
    const config = world.config('busybox', { logPath: 'rotated.log', command: ['sh', '-c', 'while true; do echo tick; sleep 0.2; done'] });
    const id = await world.run(pod, config);
    const path = join(pod.config.logDirectory, 'rotated.log');
    // The kubelet's rotation: rename, then ReopenContainerLog; a planted symlink takes the name between.
    await rename(path, `${path}.1`);
    await writeFile(join(outside, 'victim'), 'host file\n');
    await symlink(join(outside, 'victim'), path);
    await rejectsWith(world.daemon.clients.runtime.reopenContainerLog({ containerId: id }), 'FAILED_PRECONDITION', /rotated\.log" is a symbolic link/);
    assert.equal(await readFile(join(outside, 'victim'), 'utf8'), 'host file\n');
    // Without the symlink the reopen makes a fresh file and conmon writes to it.
    await unlink(path);
    await world.daemon.clients.runtime.reopenContainerLog({ containerId: id });
    await eventually('a line in the reopened log', async () => (await readFile(path, 'utf8')).includes('tick'));
    assert.ok((await lstat(path)).isFile());
    assert.equal(await readFile(join(outside, 'victim'), 'utf8'), 'host file\n');
  });

  it('creates the log in a new sub-directory and passes runtime.log_size_max to conmon', async () => {
    const pod = await world.pod();
    const script = 'i=0; while [ $i -lt 2000 ]; do echo "line $i of a log that outgrows its cap"; i=$((i+1)); done';
    const id = await world.run(pod, world.config('busybox', { logPath: 'app/0.log', command: ['sh', '-c', script] }));
    await world.waitExited(id);
    const path = join(pod.config.logDirectory, 'app/0.log');
    const st = await stat(path);
    assert.ok(st.isFile());
    // 2000 lines of ~45 bytes plus CRI prefixes: ~150 KiB unbounded; conmon truncates at the cap.
    assert.ok(st.size <= LOG_SIZE_MAX, `log is ${st.size} bytes, more than log_size_max ${LOG_SIZE_MAX}`);
    assert.ok(st.size > 0);
  });
});
