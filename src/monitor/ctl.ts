/**
 * conmon's control FIFO `<bundle>/ctl`: text lines `<type> <a> <b>\n`; `1 <height> <width>` resizes the
 * terminal, `2 0 0` reopens the log file (conmon ctrl.c).
 *
 * conmon's parser handles only the first message of each read correctly, so writes to one FIFO are
 * serialised with a short pause between them. The FIFO is opened non-blocking: a blocking open would
 * hang forever once conmon is gone (it fails with ENXIO instead).
 */
import { constants } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { setTimeout as delay } from 'node:timers/promises';
import { KeyedMutex } from '../common/locks.js';
import { MonitorError } from './errors.js';

const RESIZE = 1;
const REOPEN_LOGS = 2;
/** Time for conmon's main loop to read one message before the next is written. */
const MESSAGE_GAP_MS = 15;

const writers = new KeyedMutex();

/** Writes one control message to a ctl FIFO. `id` is only for error messages. */
export async function writeCtl(ctlPath: string, type: number, a: number, b: number, id: string): Promise<void> {
  await writers.run(ctlPath, async () => {
    let handle;
    try {
      handle = await open(ctlPath, constants.O_WRONLY | constants.O_NONBLOCK);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENXIO' || code === 'ENOENT') {
        throw new MonitorError('FailedPrecondition', `container "${id}" has no running monitor (${code} on ${ctlPath})`, id, { cause: err });
      }
      throw new MonitorError('Internal', `cannot open control fifo of container "${id}": ${(err as Error).message}`, id, { cause: err });
    }
    try {
      await handle.write(`${type} ${a} ${b}\n`);
    } finally {
      await handle.close();
    }
    await delay(MESSAGE_GAP_MS);
  });
}

/** Resizes the terminal of the process behind this ctl FIFO. */
export async function resizeTerminal(ctlPath: string, width: number, height: number, id: string): Promise<void> {
  if (!Number.isInteger(width) || !Number.isInteger(height) || width <= 0 || height <= 0 || width > 65535 || height > 65535) {
    throw new MonitorError('InvalidArgument', `invalid terminal size ${width}x${height}`, id);
  }
  await writeCtl(ctlPath, RESIZE, height, width, id);
}

/**
 * Asks conmon to reopen the log at `logPath` and returns once the new file exists. conmon creates the
 * new file by renaming `<path>.tmp` over `<path>`, so a file with a new inode marks completion (the
 * caller normally renamed the old log away first; otherwise conmon truncates it in place).
 */
export async function reopenLog(ctlPath: string, logPath: string, id: string, timeoutMs = 5000): Promise<void> {
  const before = await inode(logPath);
  await writeCtl(ctlPath, REOPEN_LOGS, 0, 0, id);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const now = await inode(logPath);
    if (now !== undefined && now !== before) return;
    if (Date.now() >= deadline) {
      throw new MonitorError('DeadlineExceeded', `container "${id}" did not reopen its log file ${logPath} within ${timeoutMs} ms`, id);
    }
    await delay(10);
  }
}

async function inode(path: string): Promise<bigint | undefined> {
  try {
    return (await stat(path, { bigint: true })).ino;
  } catch {
    return undefined;
  }
}
