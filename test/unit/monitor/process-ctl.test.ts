/** /proc start times and the ctl FIFO protocol (against a FIFO this test reads itself). */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { constants, openSync } from 'node:fs';
import { Socket } from 'node:net';
import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isKind } from '../../../src/common/errors.js';
import { isSameProcessAlive, processStartTime, readPidFile } from '../../../src/monitor/process.js';
import { reopenLog, resizeTerminal } from '../../../src/monitor/ctl.js';

describe('monitor/process', () => {
  it('start time identifies a process; a dead or reused pid does not match', async () => {
    const child = spawn('sleep', ['10']);
    await new Promise((r) => child.once('spawn', r));
    const start = await processStartTime(child.pid!);
    assert.equal(typeof start, 'bigint');
    assert.equal(await isSameProcessAlive(child.pid!, start!), true);
    assert.equal(await isSameProcessAlive(child.pid!, start! + 1n), false);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    assert.equal(await isSameProcessAlive(child.pid!, start!), false);
    assert.equal(await processStartTime(-1), undefined);
  });

  it('reads pid files', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'stove-pid-'));
    await writeFile(join(dir, 'p'), '1234\n');
    assert.equal(await readPidFile(join(dir, 'p')), 1234);
    await writeFile(join(dir, 'p'), '');
    assert.equal(await readPidFile(join(dir, 'p')), undefined);
    assert.equal(await readPidFile(join(dir, 'none')), undefined);
    await rm(dir, { recursive: true });
  });
});

describe('monitor/ctl', () => {
  let dir: string;
  let fifo: string;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stove-ctl-'));
    fifo = join(dir, 'ctl');
    execFileSync('mkfifo', [fifo]);
  });

  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /**
   * Reads what arrives on the FIFO, one read at a time, as conmon does. O_RDWR keeps the FIFO open
   * between writers, like conmon's own dummy writer; a net.Socket polls it (an fs stream would park a
   * thread-pool thread in read() and keep the process from exiting).
   */
  function reader(onRead: (read: string) => void = () => {}): { reads: string[]; close: () => void } {
    const reads: string[] = [];
    const socket = new Socket({ fd: openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK), readable: true, writable: false });
    socket.on('data', (d) => {
      reads.push(d.toString());
      onRead(d.toString());
    });
    return { reads, close: () => socket.destroy() };
  }

  it('resize and reopen write one message per read, in conmon\'s format', async () => {
    const log = join(dir, 'c.log');
    // conmon answers a reopen by renaming <log>.tmp over <log>; this reader does the same.
    const r = reader((read) => {
      if (read === '2 0 0\n') void writeFile(`${log}.tmp`, '').then(() => rename(`${log}.tmp`, log));
    });
    await Promise.all([resizeTerminal(fifo, 101, 33, 'c1'), resizeTerminal(fifo, 80, 24, 'c1')]);
    await writeFile(log, 'old');
    await rename(log, `${log}.1`);
    await reopenLog(fifo, log, 'c1', 2000);
    r.close();
    assert.deepEqual(r.reads, ['1 33 101\n', '1 24 80\n', '2 0 0\n']);
  });

  it('no reader (conmon gone) is FailedPrecondition, not a hang; bad sizes are InvalidArgument', async () => {
    await assert.rejects(resizeTerminal(fifo, 80, 24, 'c1'), (e) => isKind(e, 'FailedPrecondition'));
    await assert.rejects(resizeTerminal(join(dir, 'none'), 80, 24, 'c1'), (e) => isKind(e, 'FailedPrecondition'));
    await assert.rejects(resizeTerminal(fifo, 0, 24, 'c1'), (e) => isKind(e, 'InvalidArgument'));
  });

  it('reopenLog gives up with DeadlineExceeded when no new file appears', async () => {
    const r = reader();
    await assert.rejects(reopenLog(fifo, join(dir, 'never.log'), 'c1', 100), (e) => isKind(e, 'DeadlineExceeded'));
    r.close();
  });
});
