/** Pause liveness through a held /proc/<pid>/statm fd, and the stat line parser both checks share. */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { isSameProcessAlive, parseStat, processStartTime, ProcessProbes } from '../../../src/monitor/process.js';
import { eventually, waitFor } from '../../helpers/wait.js';

async function started(child: ChildProcess): Promise<{ pid: number; start: bigint }> {
  await new Promise((r) => child.once('spawn', r));
  const start = await processStartTime(child.pid!);
  assert.equal(typeof start, 'bigint');
  return { pid: child.pid!, start: start! };
}

async function killed(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
}

describe('monitor/process probes', () => {
  const children: ChildProcess[] = [];
  afterEach(async () => {
    for (const c of children.splice(0)) await killed(c);
  });

  /** A `sleep 30` killed after the test, with its pid and start time. */
  async function sleeper(): Promise<{ child: ChildProcess; pid: number; start: bigint }> {
    const child = spawn('sleep', ['30']);
    children.push(child);
    return { child, ...(await started(child)) };
  }

  it('the same pid and start time is alive; another start time or a reaped process is dead', async () => {
    const { child, pid, start } = await sleeper();
    const probes = new ProcessProbes();
    assert.equal(probes.isAlive(pid, start), true);
    assert.equal(probes.size, 1);
    assert.equal(probes.isAlive(pid, start), true, 'the held fd answers again');
    assert.equal(probes.isAlive(pid, start + 1n), false, 'same pid, different start time');
    assert.equal(probes.isAlive(pid, start), true, 'the held fd is kept for the process itself');
    await killed(child);
    assert.equal(probes.isAlive(pid, start), false, 'gone: the held fd fails once the process is reaped');
    assert.equal(probes.size, 0, 'a dead process keeps no fd');
    assert.equal(probes.isAlive(pid, start), false);
    assert.equal(probes.isAlive(-1, start), false);
    assert.equal(probes.isAlive(0, start), false);
  });

  it('a zombie is dead, for the held fd and for a fresh check', async () => {
    // sh starts a child, then becomes a sleep that never reaps it: the child, killed once the probe
    // holds its fd, stays a zombie. (Killed while sh still runs, it could be reaped by sh.)
    const parent = spawn('sh', ['-c', 'sleep 30 & echo $!; exec sleep 30'], { stdio: ['ignore', 'pipe', 'ignore'] });
    children.push(parent);
    let out = '';
    parent.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    const pid = await waitFor('the child pid', () => (out.includes('\n') ? Number.parseInt(out, 10) : undefined));
    await eventually('sh to become sleep', () => readFileSync(`/proc/${parent.pid}/comm`, 'latin1') === 'sleep\n');
    const start = await processStartTime(pid);
    assert.notEqual(start, undefined);
    const probes = new ProcessProbes();
    assert.equal(probes.isAlive(pid, start!), true, 'the running child');
    assert.equal(probes.size, 1, 'its fd is held, so the next check reads that fd');
    process.kill(pid, 'SIGKILL');
    await eventually('the child to be a zombie', () => parseStat(readFileSync(`/proc/${pid}/stat`, 'latin1'))?.state === 'Z');
    assert.equal(probes.isAlive(pid, start!), false, 'held fd of a zombie');
    assert.equal(probes.size, 0, 'and let go');
    assert.equal(new ProcessProbes().isAlive(pid, start!), false, 'fresh open of a zombie');
    assert.equal(await isSameProcessAlive(pid, start!), false);
  });

  it('release closes the fd; the next check reopens it', async () => {
    const { pid, start } = await sleeper();
    const probes = new ProcessProbes();
    assert.equal(probes.isAlive(pid, start), true);
    probes.release(pid);
    assert.equal(probes.size, 0);
    probes.release(pid);
    assert.equal(probes.isAlive(pid, start), true);
    assert.equal(probes.size, 1);
    probes.release(pid);
  });

  it('parses stat lines whose command name holds spaces and parentheses', () => {
    const tail = ' 1 1 0 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 98765 1000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0';
    assert.deepEqual(parseStat(`42 (a) b) (c) S${tail}`), { state: 'S', startTime: '98765' });
    assert.deepEqual(parseStat(`42 (x) Z${tail}\n`), { state: 'Z', startTime: '98765' });
    assert.equal(parseStat('42 (x) S 1 2 3'), undefined, 'too few fields');
    assert.equal(parseStat('no parenthesis'), undefined);
    assert.equal(parseStat(''), undefined);
    assert.deepEqual(parseStat(readFileSync('/proc/self/stat', 'latin1'))?.state, 'R');
  });
});
