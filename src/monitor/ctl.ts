/**
 * conmon's control FIFO `<bundle>/ctl`: text lines `<type> <a> <b>\n`; `1 <height> <width>` resizes the
 * terminal, `2 0 0` reopens the log file (conmon ctrl.c).
 *
 * conmon's parser handles only the first message of each read correctly (it parses every line of a
 * read from the buffer's start), so two messages must never wait in the FIFO together: writes to one
 * FIFO are serialised, and a write that follows the previous one within MESSAGE_GAP_MS first waits out
 * the rest of that gap, the time conmon's main loop takes to read a message. conmon says nothing when
 * it has read one (a resize has no visible effect outside its terminal), so the gap is the one wait
 * left; a lone write, the usual case, returns at once. The FIFO is opened non-blocking: a blocking open
 * would hang forever once conmon is gone (it fails with ENXIO instead).
 */
import { constants } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { setTimeout as delay } from 'node:timers/promises';
import { KeyedMutex } from '../common/locks.js';
import { poll } from '../common/poll.js';
import { MonitorError } from './errors.js';

const RESIZE = 1;
const REOPEN_LOGS = 2;
/** Time for conmon's main loop to read one message before the next is written. */
const MESSAGE_GAP_MS = 15;

const writers = new KeyedMutex();
/** When the last message went to each FIFO (performance.now()), while it may still be unread. */
const lastWrite = new Map<string, number>();

/** Writes one control message to a ctl FIFO. `id` is only for error messages. */
export async function writeCtl(ctlPath: string, type: number, a: number, b: number, id: string): Promise<void> {
  await writers.run(ctlPath, async () => {
    const since = performance.now() - (lastWrite.get(ctlPath) ?? -Infinity);
    if (since < MESSAGE_GAP_MS) await delay(MESSAGE_GAP_MS - since);
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
    const at = performance.now();
    lastWrite.set(ctlPath, at);
    setTimeout(() => {
      if (lastWrite.get(ctlPath) === at) lastWrite.delete(ctlPath);
    }, MESSAGE_GAP_MS).unref();
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
  const reopened = await poll(
    async () => {
      const now = await inode(logPath);
      return now !== undefined && now !== before ? true : undefined;
    },
    { timeoutMs, maxIntervalMs: 50 },
  );
  if (!reopened) throw new MonitorError('DeadlineExceeded', `container "${id}" did not reopen its log file ${logPath} within ${timeoutMs} ms`, id);
}

async function inode(path: string): Promise<bigint | undefined> {
  try {
    return (await stat(path, { bigint: true })).ino;
  } catch {
    return undefined;
  }
}
