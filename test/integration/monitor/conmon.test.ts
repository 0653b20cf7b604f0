/**
 * Containers under real conmon + runc: create/start, the CRI log, exit files (live and read back),
 * kill, failed creates leaving nothing behind, and conmon outliving the process that created it.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { lstat, readFile, readdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { ExitWatcher, readExit, wasOomKilled, type ExitRecord } from '../../../src/monitor/exits.js';
import { isSameProcessAlive, processStartTime } from '../../../src/monitor/process.js';
import { silentLogger } from '../../../src/common/logger.js';
import { MonitorError } from '../../../src/monitor/errors.js';
import { RuncError } from '../../../src/runtime/runc.js';
import { Monitor } from '../../../src/monitor/monitor.js';
import { makeBundle, type BundleOptions, type OciSpec } from '../../helpers/bundle.js';
import { suiteHooks } from '../../helpers/suite.js';
import { MonitorFixture, missingPrerequisite } from './fixture.js';
import { eventually } from '../../helpers/wait.js';

async function exists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch {
    return false;
  }
}

/** conmon processes whose command line names this container. */
async function conmonsFor(id: string): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    const argv = cmdline.split('\0');
    if (argv[0]?.endsWith('conmon') && argv.includes(id)) found.push(Number(entry));
  }
  return found;
}

describe('monitor: containers under conmon', function () {
  this.timeout(20_000);
  let fx: MonitorFixture;

  suiteHooks({
    what: 'monitor tests',
    skipReason: missingPrerequisite,
    setup: async () => {
      fx = await MonitorFixture.create();
    },
    cleanup: async () => {
      await fx?.cleanup();
    },
  });

  it('creates and starts a container whose output lands in the CRI log', async () => {
    const c = await fx.create({ args: ['sh', '-c', 'echo hello; echo oops >&2; printf partial'] });
    assert.equal((await fx.runc.state(c.id)).status, 'created');
    assert.ok(c.pid > 0 && c.conmonPid > 0 && c.pid !== c.conmonPid);
    assert.equal(await processStartTime(c.pid), c.pidStartTime);
    assert.ok(await isSameProcessAlive(c.conmonPid, c.conmonStartTime));
    assert.ok(await exists(join(fx.attachDir, c.id)), 'attach link');
    await fx.runc.start(c.id);
    // stdout and stderr are separate pipes: conmon may log either first.
    const log = await fx.waitForLog(c.logPath, (l) => l.includes('partial') && l.includes('oops'));
    assert.match(log, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}[+-]\d\d:\d\d stdout F hello$/m);
    assert.match(log, / stderr F oops$/m);
    assert.match(log, / stdout P partial$/m);
  });

  it('records the exit code and finish time; the watcher notices within a second', async () => {
    const seen: ExitRecord[] = [];
    const watcher = new ExitWatcher({ exitsDir: fx.exitsDir, onExit: (r) => void seen.push(r), log: silentLogger });
    await watcher.start();
    try {
      const c = await fx.create({ args: ['sh', '-c', 'sleep 0.2; exit 7'] });
      await fx.runc.start(c.id);
      const startedNs = BigInt(Date.now()) * 1_000_000n;
      await eventually('the watcher to report the exit', () => seen.some((r) => r.id === c.id)).catch(() => {});
      const record = seen.find((r) => r.id === c.id);
      assert.ok(record, 'watcher reported the exit');
      const noticedNs = BigInt(Date.now()) * 1_000_000n;
      assert.equal(record.exitCode, 7);
      assert.ok(record.finishedAtNs >= startedNs && record.finishedAtNs <= noticedNs, 'finish time is the exit file mtime');
      assert.ok(noticedNs - record.finishedAtNs < 1_000_000_000n, 'noticed within a second');
      assert.deepEqual(await fx.monitor.readExit(c.id), record);
      assert.equal(await readFile(join(c.persistDir, 'exit'), 'utf8'), '7');
      assert.equal((await fx.runc.state(c.id)).status, 'stopped');
      assert.equal(seen.filter((r) => r.id === c.id).length, 1, 'reported once');
      assert.equal(await wasOomKilled(c.persistDir), false);
    } finally {
      watcher.stop();
    }
  });

  it('reads back an exit that happened while nothing was watching', async () => {
    const c = await fx.run({ args: ['sh', '-c', 'exit 3'] });
    const record = await fx.monitor.waitForExit(c.id, 5000);
    assert.equal(record?.exitCode, 3);
    // A watcher started afterwards reports it only when asked to.
    const seen: ExitRecord[] = [];
    const watcher = new ExitWatcher({ exitsDir: fx.exitsDir, onExit: (r) => void seen.push(r), log: silentLogger });
    await watcher.start({ emitExisting: true });
    watcher.stop();
    assert.deepEqual(seen.find((r) => r.id === c.id), record);
  });

  it('kill with SIGKILL gives exit code 137; killing it again is a FailedPrecondition', async () => {
    const c = await fx.run({ args: ['sleep', '1000'] });
    assert.equal((await fx.runc.state(c.id)).status, 'running');
    await fx.runc.kill(c.id, 'KILL');
    const record = await fx.monitor.waitForExit(c.id, 5000);
    assert.equal(record?.exitCode, 137);
    const err = await fx.runc.kill(c.id, 'KILL').then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof RuncError, String(err));
    assert.equal(err.kind, 'FailedPrecondition');
    await fx.destroy(c.id);
    assert.equal(await exists(join(fx.attachDir, c.id)), false, 'attach link removed');
    assert.equal(await readExit(fx.exitsDir, c.id), undefined, 'exit file removed');
    const missing = await fx.runc.state(c.id).then(() => undefined, (e: unknown) => e);
    assert.ok(missing instanceof RuncError && missing.kind === 'NotFound', String(missing));
  });

  it('kill --all signals every process; update changes resources of a running container', async () => {
    const c = await fx.run({ args: ['sh', '-c', 'sleep 1000 & sleep 1000'] });
    await fx.runc.update(c.id, { pids: { limit: 50 } });
    const pids = await fx.runc.pids(c.id);
    assert.ok(pids.length >= 2, `pids ${pids}`);
    await fx.runc.kill(c.id, 'SIGKILL', true);
    assert.equal((await fx.monitor.waitForExit(c.id, 5000))?.exitCode, 137);
  });

  const badMount = (spec: OciSpec) => {
    (spec['mounts'] as unknown[]).push({ destination: '/tmp/x', type: 'bind', source: '/no/such/source', options: ['bind'] });
  };
  const failures: [string, BundleOptions][] = [
    ['a missing binary', { args: ['/no/such/binary'] }],
    ['a missing bind mount source', { args: ['true'], edit: badMount }],
  ];
  for (const [what, opts] of failures) {
    it(`a create that fails on ${what} reports runc's error and leaves nothing behind`, async () => {
      const id = fx.newId();
      const err = await fx.create(opts, {}, id).then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof MonitorError, String(err));
      if (process.env['STOVE_TEST_DEBUG']) console.log(err.message);
      assert.match(err.message, new RegExp(`^failed to create container "${id}": .*no such file or directory`, 'i'));
      assert.doesNotMatch(err.message, /level=|"msg"/, 'the runtime message is extracted');
      assert.deepEqual(await conmonsFor(id), [], 'no conmon left');
      assert.equal(await exists(join(fx.base, 'runc', id)), false, 'no runc state');
      assert.equal(await exists(join(fx.attachDir, id)), false, 'no attach link');
      assert.equal(await exists(join(fx.exitsDir, id)), false, 'no exit file');
      assert.equal(await exists(join(fx.base, 'logs', `${id}.log`)), false, 'no log file');
      assert.equal(await exists(join(fx.base, 'bundles', id, 'conmon-pidfile')), false, 'no conmon files in the bundle');
    });
  }

  it('a create with an unusable log path or conmon binary fails clearly and leaves nothing behind', async () => {
    const id = fx.newId();
    const err = await fx.create({ args: ['true'] }, { logPath: join(fx.base, 'a:b.log') }, id).then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof Error && /must not contain ':'/.test(err.message), String(err));
    assert.equal(await exists(join(fx.base, 'a:b.log')), false);

    const broken = new Monitor({ ...fx.monitor.config, conmon: '/no/such/conmon' });
    const bundle = await makeBundle(fx.base, id, { args: ['true'] });
    const err2 = await broken
      .createContainer(fx.runc, { id, bundle: bundle.dir, persistDir: join(fx.base, 'persist', id), logPath: join(fx.base, 'logs', `${id}.log`) })
      .then(() => undefined, (e: unknown) => e);
    assert.ok(err2 instanceof MonitorError, String(err2));
    assert.match(err2.message, /failed to start conmon \/no\/such\/conmon/);
    assert.equal(await exists(join(fx.base, 'runc', id)), false, 'no runc state');
    assert.equal(await exists(join(fx.attachDir, id)), false, 'no attach link');
  });

  it('runs a container without a log (as a pause container) and calls beforeStart with conmon\'s pid', async () => {
    let hookPid = 0;
    const c = await fx.create({ args: ['sleep', '1000'] }, { logPath: '', beforeStart: async (pid) => void (hookPid = pid) });
    assert.ok(hookPid > 0, 'hook called');
    await fx.runc.start(c.id);
    assert.equal((await fx.runc.state(c.id)).status, 'running');
    assert.equal(await exists(c.logPath), false);
  });

  it('a failing beforeStart hook aborts the create and leaves nothing behind', async () => {
    const id = fx.newId();
    let hookPid = 0;
    const err = await fx
      .create({ args: ['true'] }, { beforeStart: async (pid) => { hookPid = pid; throw new Error('no cgroup for you'); } }, id)
      .then(() => undefined, (e: unknown) => e);
    assert.match(String(err), /no cgroup for you/);
    await eventually('conmon to be gone', async () => (await processStartTime(hookPid)) === undefined);
    assert.deepEqual(await conmonsFor(id), []);
    assert.equal(await exists(join(fx.base, 'runc', id)), false, 'no runc state');
    assert.equal(await exists(join(fx.attachDir, id)), false, 'no attach link');
  });

  it('notices OOM kills', async function () {
    const c = await fx.run({ args: ['sh', '-c', 'tail /dev/zero'], memoryLimit: 16 * 1024 * 1024 });
    const record = await fx.monitor.waitForExit(c.id, 10_000);
    assert.equal(record?.exitCode, 137);
    // conmon writes the oom file just before the exit file
    assert.equal(await wasOomKilled(c.persistDir), true);
  });

  it('conmon and the container survive the process that created them', async () => {
    const id = fx.newId();
    const script = resolve(import.meta.dirname, 'create-child.js');
    const child = spawn(process.execPath, [script, fx.base, id], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    await eventually('the creator to print the container', () => out.includes('\n'), 15_000);
    const created = JSON.parse(out.trim()) as { pid: number; conmonPid: number };
    // the creator waits forever; kill it hard, as a crash would
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    // Everything below happens after the creator died; the exit conmon records at the end proves it
    // outlived the creator without a timed window.
    assert.equal((await fx.runc.state(id)).status, 'running');
    assert.ok((await processStartTime(created.conmonPid)) !== undefined, 'conmon alive');
    const stat = await readFile(`/proc/${created.conmonPid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    assert.notEqual(Number(fields[1]), child.pid, 'conmon is not a child of the creator');
    assert.equal(Number(fields[3]), created.conmonPid, 'conmon leads its own session');
    // and it still records the exit
    await fx.runc.kill(id, 'KILL');
    assert.equal((await fx.monitor.waitForExit(id, 5000))?.exitCode, 137);
    await fx.destroy(id);
  });
});
