/**
 * Real cgroups on this host (v1 hybrid here, v2 elsewhere): create a cgroup under a fresh parent, move a
 * process in, read its stats, see an OOM kill, remove everything.
 */
import assert from 'node:assert/strict';
import { access, readFile, writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { posix } from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import {
  addProcessToCgroup,
  cgroupDirs,
  createCgroup,
  detectCgroups,
  readCgroupStats,
  readOomKills,
  readParentOomKills,
  removeCgroup,
  type CgroupLayout,
} from '../../../src/platform/cgroups.js';
import { StoveError } from '../../../src/common/errors.js';
import { eventually } from '../../helpers/wait.js';

const exists = (p: string) => access(p).then(() => true, () => false);

/** A shell that waits for a line on stdin, then execs `command` (so its memory is charged after the move). */
function startWaiting(command: string): ChildProcess {
  return spawn('/bin/sh', ['-c', `read x; exec ${command}`], { stdio: ['pipe', 'ignore', 'ignore'] });
}

function exited(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', () => resolve())));
}

describe('cgroups on this host', function () {
  let layout: CgroupLayout;
  const parent = `/stove-it-${randomBytes(4).toString('hex')}`;
  const children: ChildProcess[] = [];

  before(function () {
    if (process.getuid?.() !== 0) {
      console.log('    skipped: cgroup tests need root');
      this.skip();
    }
  });

  before(async () => {
    layout = await detectCgroups();
  });

  after(async () => {
    for (const c of children) {
      c.kill('SIGKILL');
      await exited(c);
    }
    if (layout) await removeCgroup(layout, parent).catch((e) => console.error('cleanup:', e));
  });

  it('creates a cgroup, moves a process in and reads its stats', async () => {
    const path = `${parent}/c1`;
    await createCgroup(layout, path);
    const dirs = cgroupDirs(layout, path);
    for (const d of Object.values(dirs)) if (!d.includes('/unified/')) assert.ok(await exists(d), d);

    const child = startWaiting('sleep 300');
    children.push(child);
    await addProcessToCgroup(layout, path, child.pid!);
    child.stdin!.write('go\n');
    // It ran inside the cgroup once it has exec'd sleep and gone to sleep (its CPU time is charged then).
    await eventually('the process to exec sleep inside the cgroup', async () => {
      const [cmdline, stat] = await Promise.all([readFile(`/proc/${child.pid}/cmdline`, 'utf8'), readFile(`/proc/${child.pid}/stat`, 'utf8')]);
      return cmdline.startsWith('sleep\0') && stat.slice(stat.lastIndexOf(')') + 2).startsWith('S');
    }, 10_000);

    const stats = await readCgroupStats(layout, path);
    assert.ok(stats.cpu && stats.cpu.usageNs > 0n, `cpu usage ${stats.cpu?.usageNs}`);
    assert.ok(stats.memory && stats.memory.usageBytes > 0n, `memory usage ${stats.memory?.usageBytes}`);
    assert.ok(stats.memory.workingSetBytes <= stats.memory.usageBytes);
    assert.equal(stats.memory.limitBytes, undefined, 'no limit set');
    assert.deepEqual(stats.pids?.current, 1n);
    assert.equal(stats.oomKills ?? 0n, 0n);

    // A cgroup that still holds a process cannot be removed, and the error says why.
    await assert.rejects(removeCgroup(layout, path, { retries: 1, delayMs: 10 }), (err: unknown) => {
      assert.ok(err instanceof StoveError && err.kind === 'Internal');
      assert.match(err.message, new RegExp(`processes still inside: ${child.pid}`));
      return true;
    });

    child.kill('SIGKILL');
    await exited(child);
    await removeCgroup(layout, path);
    for (const d of Object.values(dirs)) assert.equal(await exists(d), false, d);
    await assert.rejects(readCgroupStats(layout, path), (err: unknown) => err instanceof StoveError && err.kind === 'NotFound');
  });

  it('counts an OOM kill', async () => {
    const path = `${parent}/oom`;
    await createCgroup(layout, path);
    const dirs = cgroupDirs(layout, path);
    const limit = String(16 * 1024 * 1024);
    if (layout.version === 2) {
      await writeFile(posix.join(dirs.unified!, 'memory.max'), limit);
      await writeFile(posix.join(dirs.unified!, 'memory.swap.max'), '0').catch(() => {});
    } else {
      await writeFile(posix.join(dirs.memory!, 'memory.limit_in_bytes'), limit);
      await writeFile(posix.join(dirs.memory!, 'memory.memsw.limit_in_bytes'), limit).catch(() => {});
    }
    assert.equal((await readCgroupStats(layout, path)).memory!.limitBytes, BigInt(limit));
    const parentBefore = await readParentOomKills(layout, path);

    // tail buffers a line that never ends: it grows until the kernel kills it.
    const child = startWaiting('tail /dev/zero');
    children.push(child);
    await addProcessToCgroup(layout, path, child.pid!);
    child.stdin!.write('go\n');
    await exited(child);
    assert.equal(child.signalCode, 'SIGKILL');
    assert.ok(((await readOomKills(layout, path)) ?? 0n) >= 1n, 'oom_kill counted');
    await removeCgroup(layout, path);
    // On cgroup v2 the kill stays counted above the cgroup once it is gone (as a systemd scope goes
    // when empty); v1 counts it in the victim's own cgroup only.
    if (layout.version === 2) assert.ok((await readParentOomKills(layout, path))! > parentBefore!, 'the parent counted the kill');
  });

  it('removes a whole tree, deepest first, and ignores what is already gone', async () => {
    await createCgroup(layout, `${parent}/t/a/b`);
    await createCgroup(layout, `${parent}/t/c`);
    await removeCgroup(layout, `${parent}/t`);
    for (const d of Object.values(cgroupDirs(layout, `${parent}/t`))) assert.equal(await exists(d), false, d);
    await removeCgroup(layout, `${parent}/t`);
  });
});
