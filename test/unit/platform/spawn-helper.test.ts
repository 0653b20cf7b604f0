/**
 * spawnProcess through the spawn helper and through child_process: the same behaviour either way
 * (output per fd, stdin and its end of file, exit codes and signals, extra socketpair fds both ways,
 * environment and cwd, own process group, failures to start), and a helper that dies.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Readable, Writable } from 'node:stream';
import { pidExists } from '../../helpers/process.js';
import { eventually } from '../../helpers/wait.js';
import { DEFAULT_SPAWN_HELPER, setSpawnHelper, spawnProcess, type SpawnedProcess, type SpawnProcessOptions } from '../../../src/platform/spawn-helper.js';

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  out: string;
  err: string;
  events: string[];
}

/** Runs to 'close', collecting stdout/stderr and the order of exit and close. */
function run(file: string, args: string[], options: Partial<SpawnProcessOptions> = {}, input?: string): Promise<Run> {
  const child = spawnProcess(file, args, { stdio: ['pipe', 'pipe', 'pipe'], ...options });
  return collect(child, input);
}

function collect(child: SpawnedProcess, input?: string): Promise<Run> {
  return new Promise((resolve, reject) => {
    const r: Run = { code: null, signal: null, out: '', err: '', events: [] };
    child.stdout?.on('data', (d: Buffer) => (r.out += d.toString()));
    child.stderr?.on('data', (d: Buffer) => (r.err += d.toString()));
    child.once('error', reject);
    child.once('exit', () => r.events.push('exit'));
    child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
      r.events.push('close');
      Object.assign(r, { code, signal });
      resolve(r);
    });
    if (input !== undefined) child.stdin?.end(input);
  });
}

for (const via of ['helper', 'child_process'] as const) {
  describe(`spawnProcess through ${via}`, function () {
    let dir: string;
    before(async () => {
      setSpawnHelper(via === 'helper' ? DEFAULT_SPAWN_HELPER : null);
      dir = await realpath(await mkdtemp(join(tmpdir(), 'stove-spawn-')));
    });
    after(async () => {
      setSpawnHelper(DEFAULT_SPAWN_HELPER);
      await rm(dir, { recursive: true, force: true });
    });

    it('relays stdout and stderr apart, stdin with its end of file, and the exit code', async () => {
      const r = await run('/bin/sh', ['-c', 'echo out; echo err >&2; cat; exit 3'], {}, 'input line\n');
      assert.deepEqual([r.code, r.signal, r.out, r.err], [3, null, 'out\ninput line\n', 'err\n']);
      assert.deepEqual(r.events, ['exit', 'close']);
    });

    it('moves large output and input byte for byte', async () => {
      const big = 'x'.repeat(3 * 1024 * 1024 + 17);
      const r = await run('/bin/cat', [], {}, big);
      assert.equal(r.out.length, big.length);
      assert.equal(r.out, big);
    });

    it('passes the environment and cwd, and looks the program up in the given PATH', async () => {
      const r = await run('sh', ['-c', 'echo "$FOO:$PWD"'], { cwd: dir, env: { PATH: '/usr/bin:/bin', FOO: 'bar' } });
      assert.equal(r.out, `bar:${dir}\n`);
    });

    it('reports a signal, and kill() sends one', async () => {
      const child = spawnProcess('/bin/sleep', ['30'], { stdio: ['ignore', 'pipe', 'pipe'] });
      await new Promise((resolve) => child.once('spawn', resolve));
      assert.ok(child.pid! > 0);
      const done = collect(child);
      assert.equal(child.kill('SIGTERM'), true);
      const r = await done;
      assert.deepEqual([r.code, r.signal], [null, 'SIGTERM']);
    });

    it('gives a detached child its own process group', async () => {
      const child = spawnProcess('/bin/sh', ['-c', 'ps -o pgid= -p $$; sleep 30 & wait'], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
      let out = '';
      child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      await new Promise((resolve) => child.once('spawn', resolve));
      await eventually('the shell to print its process group', () => out.includes('\n'), 20_000);
      assert.equal(Number(out.trim()), child.pid);
      const done = collect(child);
      process.kill(-child.pid!, 'SIGKILL'); // the whole group: sh and its sleep
      assert.equal((await done).signal, 'SIGKILL');
    });

    it('relays extra fds both ways (conmon\'s sync and start pipes)', async () => {
      // Reads one byte on fd 4, answers on fd 3, and exits.
      const child = spawnProcess('/bin/sh', ['-c', 'head -c1 <&4 >/dev/null; echo \'{"pid": 7}\' >&3'], {
        stdio: ['ignore', 'pipe', 'pipe', 'pipe', 'pipe'],
      });
      const sync = child.stdio[3] as Readable;
      const start = child.stdio[4] as Writable;
      let message = '';
      sync.on('data', (d: Buffer) => (message += d.toString()));
      const ended = new Promise((resolve) => sync.once('end', resolve));
      const done = collect(child);
      start.write(Buffer.from([0]));
      start.end();
      await ended;
      assert.equal(message, '{"pid": 7}\n');
      assert.equal((await done).code, 0);
    });

    it('fails with ENOENT for a missing program, as child_process does', async () => {
      const child = spawnProcess(join(dir, 'missing'), [], { stdio: ['ignore', 'pipe', 'pipe'] });
      const err = await new Promise<NodeJS.ErrnoException>((resolve) => child.once('error', resolve));
      assert.equal(err.code, 'ENOENT');
      assert.equal(child.pid, undefined);
    });

    it('lets the process exit while an unreferenced child runs on', async () => {
      const script = `
        import { spawnProcess, setSpawnHelper } from ${JSON.stringify(new URL('../../../src/platform/spawn-helper.js', import.meta.url).href)};
        setSpawnHelper(${via === 'helper' ? JSON.stringify(DEFAULT_SPAWN_HELPER) : 'null'});
        const c = spawnProcess('/bin/sleep', ['30'], { stdio: ['ignore', 'ignore', 'ignore'], detached: true });
        c.once('spawn', () => { console.log(c.pid); c.unref(); });`;
      const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script]);
      // Node has exited and its child is still there: the child did not hold the process.
      const pid = Number(stdout.trim());
      assert.ok(pidExists(pid), `the child ${pid} outlived the process that started it`);
      process.kill(pid, 'SIGKILL');
    });
  });
}

describe('spawn helper', function () {
  after(() => setSpawnHelper(DEFAULT_SPAWN_HELPER));

  it('fails the processes it was following when it dies, and a new one serves the next', async () => {
    setSpawnHelper(DEFAULT_SPAWN_HELPER);
    const child = spawnProcess('/bin/sleep', ['30'], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    await new Promise((resolve) => child.once('spawn', resolve));
    const failed = new Promise<Error>((resolve) => child.once('error', resolve));
    const helpers = (await promisify(execFile)('pgrep', ['-P', String(process.pid), '-f', 'stove-spawn-helper'])).stdout.split('\n').filter(Boolean);
    for (const pid of helpers) process.kill(Number(pid), 'SIGKILL');
    assert.match((await failed).message, /stove-spawn-helper exited/);
    process.kill(child.pid!, 'SIGKILL');
    const r = await run('/bin/echo', ['again']);
    assert.equal(r.out, 'again\n');
  });
});
