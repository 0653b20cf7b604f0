/**
 * The daemon's one way to start processes: runCommand (to completion, with input, cwd, env, a timeout
 * that kills the whole process group, an output cap that keeps the command running) and startProcess
 * (long-lived, through the spawn helper unless its pipes go straight to the daemon).
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtemp, readFile, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { commandFailure, runCommand, startProcess, type SpawnedProcess } from '../../../src/platform/processes.js';
import { pidExists } from '../../helpers/process.js';
import { eventually } from '../../helpers/wait.js';

/** The parent pid of `pid`, from /proc/<pid>/stat (the field after the parenthesised name). */
async function parentOf(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

describe('platform/processes', function () {
  let dir: string;
  before(async () => {
    dir = await realpath(await mkdtemp(join(tmpdir(), 'stove-processes-')));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  describe('runCommand', function () {
    it('runs to completion with input, env and cwd, and keeps stdout and stderr apart', async () => {
      const r = await runCommand('sh', {
        args: ['-c', 'cat; echo "$FOO:$PWD"; echo oops >&2; exit 3'],
        input: 'in\n',
        env: { PATH: '/usr/bin:/bin', FOO: 'bar' },
        cwd: dir,
        timeoutMs: undefined,
      });
      assert.deepEqual(r, { exitCode: 3, signal: null, stdout: `in\nbar:${dir}\n`, stderr: 'oops\n', timedOut: false, truncated: false });
      assert.equal(commandFailure(r), 'oops');
    });

    it('kills the whole process group on timeout and answers once the command is dead', async () => {
      const pidFile = join(dir, 'straggler');
      const r = await runCommand('sh', { args: ['-c', `sleep 30 & echo $! > ${pidFile}; wait`], timeoutMs: 300 });
      assert.deepEqual([r.timedOut, r.exitCode, r.signal], [true, null, 'SIGKILL']);
      const straggler = Number(await readFile(pidFile, 'utf8'));
      await eventually('the background sleep to die with its group', () => !pidExists(straggler));
      assert.equal(commandFailure(r), 'timed out');
    });

    it('answers at the timeout when the command exited but a straggler outside its group holds its output', async () => {
      const pidFile = join(dir, 'session-straggler');
      const started = Date.now();
      const r = await runCommand('sh', { args: ['-c', `setsid sleep 30 & echo $! > ${pidFile}; exit 0`], timeoutMs: 300 });
      const waited = Date.now() - started;
      process.kill(Number(await readFile(pidFile, 'utf8')), 'SIGKILL');
      assert.deepEqual([r.timedOut, r.exitCode, r.signal], [true, 0, null]);
      assert.ok(waited < 10_000, `answered after ${waited} ms, not at the timeout`);
    });

    it('keeps the first maxOutputBytes of each stream and lets the command finish', async () => {
      const r = await runCommand('sh', { args: ['-c', 'head -c 1000000 /dev/zero | tr "\\0" x; echo done >&2'], timeoutMs: 10_000, maxOutputBytes: 1000 });
      assert.deepEqual([r.exitCode, r.stdout, r.stderr, r.truncated], [0, 'x'.repeat(1000), 'done\n', true]);
    });

    it('reports a program that cannot run, with the reason', async () => {
      const r = await runCommand(join(dir, 'missing'), { timeoutMs: 1000 });
      assert.equal(r.exitCode, null);
      assert.equal((r.spawnError as NodeJS.ErrnoException).code, 'ENOENT');
      assert.match(commandFailure(r), /ENOENT/);
    });
  });

  describe('startProcess', function () {
    const started: SpawnedProcess[] = [];
    afterEach(() => {
      for (const p of started.splice(0)) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    });

    for (const directPipes of [false, true]) {
      it(`starts a long-lived child ${directPipes ? 'with pipes straight to the daemon' : 'through the spawn helper'}`, async () => {
        const child = startProcess('cat', [], { stdio: ['pipe', 'pipe', 'pipe'], directPipes });
        started.push(child);
        await once(child, 'spawn');
        assert.equal(await parentOf(child.pid!) === process.pid, directPipes, 'whose child it is');
        child.stdin!.write('echo\n');
        const [line] = (await once(child.stdout!, 'data')) as [Buffer];
        assert.equal(line.toString(), 'echo\n');
        child.stdin!.end();
        assert.deepEqual(await once(child, 'close'), [0, null]);
      });
    }
  });
});
