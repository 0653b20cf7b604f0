/**
 * Exec and attach through real conmon: ExecSync (output, exit code, timeout, concurrency, size cap),
 * streaming exec with and without a terminal, attach to output and to stdin, terminal resize and
 * log reopening.
 */
import assert from 'node:assert/strict';
import { readFile, readdir, rename, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import { execProcess } from '../../../src/monitor/exec-dir.js';
import { EXEC_SYNC_MAX_OUTPUT, execSync } from '../../../src/monitor/exec-sync.js';
import { MonitorError } from '../../../src/monitor/errors.js';
import { resizeTerminal } from '../../../src/monitor/ctl.js';
import { isKind } from '../../../src/common/errors.js';
import { isSameProcessAlive } from '../../../src/monitor/process.js';
import { suiteHooks } from '../../helpers/suite.js';
import { MonitorFixture, missingPrerequisite, type TestContainer } from './fixture.js';
import { eventually, waitFor } from '../../helpers/wait.js';

/** A Writable that keeps everything written to it. */
class Collector extends Writable {
  private readonly chunks: Buffer[] = [];

  override _write(chunk: Buffer, _enc: BufferEncoding, done: () => void): void {
    this.chunks.push(chunk);
    done();
  }

  text(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }

  get length(): number {
    return this.chunks.reduce((n, c) => n + c.length, 0);
  }

  async waitFor(pattern: RegExp | string, timeoutMs = 5000): Promise<string> {
    const seen = () => {
      const text = this.text();
      return (typeof pattern === 'string' ? text.includes(pattern) : pattern.test(text)) ? text : undefined;
    };
    return waitFor(`${String(pattern)} in the output`, seen, timeoutMs).catch(() => {
      throw new Error(`never saw ${pattern}; got ${JSON.stringify(this.text())}`);
    });
  }
}

/** Processes (zombies included) whose command name is `name`: pid, state, and arguments (empty for a zombie). */
async function processesNamed(name: string): Promise<{ pid: number; state: string; args: string }[]> {
  const out: { pid: number; state: string; args: string }[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    if (stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')) !== name) continue;
    const args = (await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '')).split('\0').join(' ');
    out.push({ pid: Number(entry), state: stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3), args });
  }
  return out;
}

describe('monitor: exec and attach through conmon', function () {
  this.timeout(20_000);
  let fx: MonitorFixture;
  let sleeper: TestContainer;
  const proc = (args: string[], terminal = false) => execProcess(sleeper.bundle.spec.process, args, terminal);

  suiteHooks({
    what: 'monitor tests',
    skipReason: missingPrerequisite,
    setup: async () => {
      fx = await MonitorFixture.create();
      sleeper = await fx.run({ args: ['sleep', '1000'] });
    },
    cleanup: async () => {
      await fx?.cleanup();
    },
  });

  describe('ExecSync', () => {
    it('returns stdout, stderr (partial lines kept as they were) and the exit code', async () => {
      const r = await execSync(fx.monitor.config, fx.runc, sleeper.id, proc(['sh', '-c', 'echo out1; echo err1 >&2; printf nonl; exit 3']), 10);
      assert.equal(r.stdout.toString(), 'out1\nnonl');
      assert.equal(r.stderr.toString(), 'err1\n');
      assert.equal(r.exitCode, 3);
      assert.equal(r.truncated, false);
      const ok = await execSync(fx.monitor.config, fx.runc, sleeper.id, proc(['true']), 0);
      assert.deepEqual([ok.exitCode, ok.stdout.length, ok.stderr.length], [0, 0, 0]);
    });

    it('a timeout is DeadlineExceeded "command timed out"', async () => {
      const started = Date.now();
      const err = await execSync(fx.monitor.config, fx.runc, sleeper.id, proc(['sleep', '10']), 1).then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof MonitorError, String(err));
      assert.equal(err.kind, 'DeadlineExceeded');
      assert.equal(err.message, 'command timed out');
      assert.ok(Date.now() - started < 4000, 'returned soon after the timeout');
      const leftover = await fx.runc.pids(sleeper.id);
      assert.equal(leftover.length, 1, `the timed-out process was killed (pids ${leftover})`);
    });

    it('a timeout returns only once the process and its children are dead, the process reaped', async () => {
      // Copies of busybox under names of their own, so the processes can be told apart in /proc.
      const name = `busybox${Math.random().toString(36).slice(2, 8)}`; // busybox runs its first argument as the applet
      const c = await fx.run({ args: ['sleep', '1000'] });
      const script = `cp /bin/busybox /tmp/${name}m && cp /bin/busybox /tmp/${name}c && { /tmp/${name}c sleep 4322 & exec /tmp/${name}m sleep 4321; }`;
      const err = await execSync(fx.monitor.config, fx.runc, c.id, execProcess(c.bundle.spec.process, ['sh', '-c', script], false), 1).then(() => undefined, (e: unknown) => e);
      assert.ok(isKind(err, 'DeadlineExceeded'), String(err));
      // The exec'd process was reaped by conmon: not even a zombie is left.
      assert.deepEqual(await processesNamed(`${name}m`), []);
      // Its child went to the container's init, which (being `sleep`) never reaps: a zombie at most.
      const child = await processesNamed(`${name}c`);
      assert.deepEqual(child.filter((p) => p.state !== 'Z'), [], `left running: ${JSON.stringify(child)}`);
      assert.deepEqual(await fx.runc.pids(c.id), [c.pid]);
    });

    it('runs 20 concurrent execs in one container', async () => {
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) => execSync(fx.monitor.config, fx.runc, sleeper.id, proc(['sh', '-c', `echo n${i}; echo e${i} >&2; exit ${i}`]), 30)),
      );
      results.forEach((r, i) => {
        assert.equal(r.stdout.toString(), `n${i}\n`);
        assert.equal(r.stderr.toString(), `e${i}\n`);
        assert.equal(r.exitCode, i);
      });
    });

    it('a command that cannot start is an error with the runtime message', async () => {
      const err = await execSync(fx.monitor.config, fx.runc, sleeper.id, proc(['/no/such/cmd']), 5).then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof MonitorError, String(err));
      // runc: "… no such file or directory"; crun: "executable file `…` not found in $PATH: No such file or directory".
      assert.match(err.message, /^failed to exec in container "[0-9a-f]+": .*no such file or directory/i);
      assert.doesNotMatch(err.message, /level=|"msg"/);
    });

    it('caps the output at 16 MiB and says so', async () => {
      const r = await execSync(fx.monitor.config, fx.runc, sleeper.id, proc(['sh', '-c', 'yes 0123456789012345678901234567890123456789012345678901234567890123 | head -c 20000000']), 30);
      assert.equal(r.truncated, true);
      assert.equal(r.stdout.length, EXEC_SYNC_MAX_OUTPUT);
      assert.match(r.stdout.subarray(0, 130).toString(), /^(0123456789012345678901234567890123456789012345678901234567890123\n){2}/);
    });

    it('in a terminal container: output on stdout with the terminal\'s line endings', async () => {
      const c = await fx.run({ args: ['sleep', '1000'], tty: true });
      const r = await execSync(fx.monitor.config, fx.runc, c.id, execProcess(c.bundle.spec.process, ['sh', '-c', 'echo hi; echo err >&2; exit 1'], true), 10);
      assert.equal(r.stdout.toString(), 'hi\r\nerr\r\n');
      assert.equal(r.stderr.length, 0);
      assert.equal(r.exitCode, 1);
    });

    it('fails for a stopped container', async () => {
      const c = await fx.run({ args: ['true'] });
      await fx.monitor.waitForExit(c.id, 5000);
      const err = await execSync(fx.monitor.config, fx.runc, c.id, proc(['true']), 5).then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof MonitorError, String(err));
      assert.ok(isKind(err, 'FailedPrecondition'), err.message);
    });
  });

  describe('streaming exec', () => {
    it('without a terminal: stdin in, separate stdout and stderr, exit code', async () => {
      const stdin = new PassThrough();
      const stdout = new Collector();
      const stderr = new Collector();
      const session = await fx.monitor.exec(fx.runc, sleeper.id, proc(['sh', '-c', 'read l; echo got:$l; echo err:$l >&2; cat; exit 4']), {
        tty: false,
        stdin,
        stdout,
        stderr,
      });
      assert.ok(session.pid > 0);
      stdin.write('hello\n');
      await stdout.waitFor('got:hello\n');
      stdin.end('rest');
      assert.equal(await session.exitCode, 4);
      assert.equal(stdout.text(), 'got:hello\nrest');
      assert.equal(stderr.text(), 'err:hello\n');
    });

    it('with a terminal: initial size, resize, exit code', async () => {
      const stdin = new PassThrough();
      const stdout = new Collector();
      const session = await fx.monitor.exec(fx.runc, sleeper.id, proc(['sh']), { tty: true, stdin, stdout, width: 90, height: 30 });
      stdin.write('stty size\n');
      await stdout.waitFor('30 90');
      await session.resize(101, 33);
      stdin.write('stty size; exit 5\n');
      await stdout.waitFor('33 101');
      assert.equal(await session.exitCode, 5);
    });

    it('ends when the process exits even though stdin stays open, and output is complete', async () => {
      const stdin = new PassThrough();
      const stdout = new Collector();
      const session = await fx.monitor.exec(fx.runc, sleeper.id, proc(['sh', '-c', 'head -c 3000000 /dev/zero | tr "\\0" x']), { tty: false, stdin, stdout });
      assert.equal(await session.exitCode, 0);
      assert.equal(stdout.length, 3_000_000);
      assert.match(stdout.text(), /^x+$/);
    });

    it('kill() ends a process whose client went away', async () => {
      const session = await fx.monitor.exec(fx.runc, sleeper.id, proc(['sleep', '1000']), { tty: false, stdout: new Collector() });
      session.kill();
      assert.equal(await session.exitCode, 137);
    });

    it('a command that cannot start is an error', async () => {
      const err = await fx.monitor.exec(fx.runc, sleeper.id, proc(['/no/such/cmd']), { tty: true, stdout: new Collector() }).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(err instanceof MonitorError, String(err));
      assert.match(err.message, /no such file or directory/);
    });

    it('execs leave no session dirs or attach links behind', async () => {
      // Execs that end each way: exit, terminal exit, kill, a command that cannot start, and ExecSync.
      const plain = await fx.monitor.exec(fx.runc, sleeper.id, proc(['true']), { tty: false, stdout: new Collector() });
      const term = await fx.monitor.exec(fx.runc, sleeper.id, proc(['sh', '-c', 'exit 2']), { tty: true, stdout: new Collector() });
      const killed = await fx.monitor.exec(fx.runc, sleeper.id, proc(['sleep', '1000']), { tty: false, stdout: new Collector() });
      killed.kill();
      assert.deepEqual(await Promise.all([plain.exitCode, term.exitCode, killed.exitCode]), [0, 2, 137]);
      await assert.rejects(fx.monitor.exec(fx.runc, sleeper.id, proc(['/no/such/cmd']), { tty: false, stdout: new Collector() }));
      await execSync(fx.monitor.config, fx.runc, sleeper.id, proc(['true']), 5);
      const sessionDirs = async () => readdir(fx.monitor.config.execDir).catch(() => [] as string[]);
      await eventually('the exec session dirs removed', async () => (await sessionDirs()).length === 0, 10_000).catch(async (err: unknown) => {
        throw new Error(`${(err as Error).message}: ${(await sessionDirs()).join(' ')}`);
      });
      const links = await readdir(fx.attachDir);
      assert.ok(links.every((name) => name.length === 64), `only container links remain: ${links}`);
    });
  });

  describe('attach', () => {
    it('keeps stdout and stderr apart, byte for byte, for large output', async () => {
      const c = await fx.create({ args: ['sh', '-c', 'head -c 1000000 /dev/zero | tr "\\0" o; head -c 700000 /dev/zero | tr "\\0" e >&2; echo done'] });
      const stdout = new Collector();
      const stderr = new Collector();
      const session = await fx.monitor.attach(c.id, { stdout, stderr });
      await fx.runc.start(c.id);
      await session.done;
      assert.equal(stdout.length, 1_000_005);
      assert.match(stdout.text(), /^o+done\n$/);
      assert.equal(stderr.length, 700_000);
      assert.match(stderr.text(), /^e+$/);
    });

    it('to a running container printing lines, and detaching leaves it running', async () => {
      const c = await fx.run({ args: ['sh', '-c', 'i=0; while true; do echo line$i; i=$((i+1)); sleep 0.05; done'] });
      const stdout = new Collector();
      const session = await fx.monitor.attach(c.id, { stdout });
      await stdout.waitFor(/line\d+\nline\d+\n/);
      session.close();
      await session.done;
      assert.equal((await fx.runc.state(c.id)).status, 'running');
    });

    it('to a container reading stdin: input arrives, stdin EOF reaches the process', async () => {
      const c = await fx.create(
        { args: ['sh', '-c', 'while read l; do echo got:$l; echo err:$l >&2; done; echo bye; exit 2'] },
        { stdin: true, stdinOnce: true },
      );
      await fx.runc.start(c.id);
      const stdin = new PassThrough();
      const stdout = new Collector();
      const stderr = new Collector();
      const session = await fx.monitor.attach(c.id, { stdin, stdout, stderr });
      stdin.write('one\n');
      await stdout.waitFor('got:one\n');
      await stderr.waitFor('err:one\n');
      stdin.end('two\n');
      await session.done;
      assert.equal(stdout.text(), 'got:one\ngot:two\nbye\n');
      assert.equal((await fx.monitor.waitForExit(c.id, 5000))?.exitCode, 2);
    });

    it('to a terminal container: resize shows in stty size', async () => {
      const c = await fx.create({ args: ['sh'], tty: true }, { stdin: true });
      await fx.runc.start(c.id);
      const stdin = new PassThrough();
      const stdout = new Collector();
      const session = await fx.monitor.attach(c.id, { stdin, stdout });
      await session.resize(101, 33);
      stdin.write('stty size\n');
      await stdout.waitFor('33 101');
      // A second writer of the same ctl FIFO right after the session's own resize.
      await resizeTerminal(join(fx.monitor.config.attachDir, c.id, 'ctl'), 120, 40, c.id);
      stdin.write('stty size\n');
      await stdout.waitFor('40 120');
      session.close();
      await session.done;
    });

    it('to a container whose monitor is gone is a FailedPrecondition', async () => {
      const c = await fx.run({ args: ['true'] });
      await fx.monitor.waitForExit(c.id, 5000);
      // conmon writes the exit file, then exits itself.
      await eventually('conmon to exit after the container', async () => !(await isSameProcessAlive(c.conmonPid, c.conmonStartTime)), 10_000);
      const err = await fx.monitor.attach(c.id, { stdout: new Collector() }).then(() => undefined, (e: unknown) => e);
      assert.ok(isKind(err, 'FailedPrecondition'), String(err));
    });
  });

  describe('attach under a deep state dir', () => {
    let deep: MonitorFixture;
    before(async () => (deep = await MonitorFixture.create({ deep: true })));
    after(async () => deep?.cleanup());

    it('reaches an attach socket whose path is longer than a unix socket address', async () => {
      const c = await deep.create({ args: ['sh', '-c', 'while read l; do echo got:$l; done'] }, { stdin: true, stdinOnce: true });
      assert.ok(`${deep.attachDir}/${c.id}/attach`.length > 108);
      await deep.runc.start(c.id);
      const stdin = new PassThrough();
      const stdout = new Collector();
      const session = await deep.monitor.attach(c.id, { stdin, stdout });
      stdin.end('deep\n');
      await session.done;
      assert.equal(stdout.text(), 'got:deep\n');
    });
  });

  describe('log reopen', () => {
    it('after a rename, returns once the new log exists and new output goes there', async () => {
      const c = await fx.run({ args: ['sh', '-c', 'i=0; while true; do echo line$i; i=$((i+1)); sleep 0.05; done'] });
      await fx.waitForLog(c.logPath, (l) => l.includes('line2'));
      const rotated = `${c.logPath}.1`;
      await rename(c.logPath, rotated);
      await fx.monitor.reopenLog(c.id, c.logPath);
      await stat(c.logPath); // exists right away
      const oldSize = (await stat(rotated)).size;
      // Four more lines in the new log mark time in which the old one must not have grown.
      const fresh = await fx.waitForLog(c.logPath, (l) => (l.match(/stdout F line\d+\n/g) ?? []).length >= 4);
      assert.equal((await stat(rotated)).size, oldSize, 'the old log stopped growing');
      const first = Number(/line(\d+)/.exec(fresh)![1]);
      const old = await readFile(rotated, 'utf8');
      const last = Number([...old.matchAll(/line(\d+)/g)].at(-1)![1]);
      assert.ok(first > last, `new log continues (${last} → ${first})`);
    });

    it('rotates by itself at log-size-max', async () => {
      const c = await fx.run({ args: ['sh', '-c', 'i=0; while [ $i -lt 200 ]; do echo line$i; i=$((i+1)); done; sleep 1000'] }, { logSizeMax: 2048 });
      await fx.waitForLog(c.logPath, (l) => l.includes('line199'));
      assert.ok((await stat(c.logPath)).size <= 2048);
    });
  });
});
