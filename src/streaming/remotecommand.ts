/**
 * The remotecommand session (exec and attach), independent of the transport: give the backend the
 * streams, turn its outcome into a status on the error stream, end the output streams, close the
 * connection. The SPDY and WebSocket front ends (spdy-command.ts, ws-command.ts) produce the
 * CommandChannels this runs on.
 */
import { finished } from 'node:stream/promises';
import type { Readable, Writable } from 'node:stream';
import type { Logger } from '../common/logger.js';
import { messageOf } from '../common/errors.js';
import type { AttachParams, ExecParams, StreamingBackend, StreamIO, TerminalSize } from './backend.js';
import { encodeStatus, exitCodeStatus, internalErrorStatus, successStatus, type Status } from './status.js';

/** An exec or attach, with the parameters stored when its URL was handed out. */
export type CommandSession = { kind: 'exec'; params: ExecParams } | { kind: 'attach'; params: AttachParams };

/** One connection's streams, whatever carries them. */
export interface CommandChannels {
  /** remotecommand protocol version 1–5: decides the status format (JSON from v4 on). */
  version: number;
  stdin?: Readable;
  stdout?: Writable;
  stderr?: Writable;
  /** The client's terminal sizes as JSON values (`{"Width":W,"Height":H}`), one per line or message. */
  resize?: Readable;
  /** Where the status goes; ended after it. */
  error: Writable;
  /** Aborted when the client goes away. */
  signal: AbortSignal;
  /** Closes the connection once everything written has gone out. */
  close(): Promise<void>;
}

/** Terminal sizes for the backend: an async iterable that keeps only the latest unread size. */
export class ResizeQueue implements AsyncIterable<TerminalSize> {
  private latest: TerminalSize | undefined;
  private ended = false;
  private waiter: ((result: IteratorResult<TerminalSize>) => void) | undefined;

  push(size: TerminalSize): void {
    if (this.ended) return;
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = undefined;
      w({ value: size, done: false });
    } else this.latest = size;
  }

  end(): void {
    this.ended = true;
    this.latest = undefined;
    const w = this.waiter;
    this.waiter = undefined;
    w?.({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterator<TerminalSize> {
    return {
      next: () => {
        if (this.latest) {
          const value = this.latest;
          this.latest = undefined;
          return Promise.resolve({ value, done: false });
        }
        if (this.ended) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => (this.waiter = resolve));
      },
      return: () => {
        this.end();
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}

/** One terminal size from a JSON value; Go decodes field names case-insensitively. */
export function parseTerminalSize(text: string): TerminalSize | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null) return undefined;
  const fields = new Map<string, unknown>(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k.toLowerCase(), v]));
  const width = fields.get('width');
  const height = fields.get('height');
  const ok = (n: unknown): n is number => typeof n === 'number' && Number.isInteger(n) && n >= 0 && n <= 0xffff;
  if (!ok(width) || !ok(height)) return undefined;
  return { width, height };
}

/** Longest resize value accepted (`{"Width":65535,"Height":65535}` is 30 bytes). */
export const MAX_RESIZE_LINE = 4096;

/**
 * Feeds newline-delimited sizes from `stream` into `queue`. An unparseable value, or more than
 * MAX_RESIZE_LINE bytes without a newline, stops it (as in Go); the rest is read and dropped, so work
 * and memory stay linear in the input and bounded per session.
 */
export function readResizeStream(stream: Readable, queue: ResizeQueue): void {
  let pending = '';
  let broken = false;
  stream.setEncoding('utf8');
  stream.on('data', (text: string) => {
    if (broken) return;
    let start = 0;
    let nl: number;
    while ((nl = text.indexOf('\n', start)) >= 0) {
      const line = (pending + text.slice(start, nl)).trim();
      pending = '';
      start = nl + 1;
      if (line.length > MAX_RESIZE_LINE) return void (broken = true);
      if (!line) continue;
      const size = parseTerminalSize(line);
      if (!size) return void (broken = true);
      queue.push(size);
    }
    if (pending.length + text.length - start > MAX_RESIZE_LINE) {
      pending = '';
      return void (broken = true);
    }
    pending += text.slice(start);
    // A message without a newline (a WebSocket frame holds exactly one value) is complete as well.
    const rest = pending.trim();
    const size = rest ? parseTerminalSize(rest) : undefined;
    if (size) {
      queue.push(size);
      pending = '';
    }
  });
}

async function settleWrites(streams: (Writable | undefined)[]): Promise<void> {
  await Promise.all(
    streams.map(async (s) => {
      if (!s) return;
      s.end();
      await finished(s, { readable: false }).catch(() => undefined);
    }),
  );
}

/** Runs one exec or attach over `channels` and closes them. Never throws. */
export async function serveCommand(
  command: CommandSession,
  channels: CommandChannels,
  backend: StreamingBackend,
  log: Logger,
): Promise<void> {
  const tty = command.params.tty;
  const resize = tty && channels.resize ? new ResizeQueue() : undefined;
  if (resize && channels.resize) readResizeStream(channels.resize, resize);
  channels.signal.addEventListener('abort', () => resize?.end(), { once: true });
  const io: StreamIO = {
    stdin: channels.stdin,
    stdout: channels.stdout,
    stderr: channels.stderr,
    tty,
    resize,
    signal: channels.signal,
  };
  const id = command.params.containerId;
  const started = performance.now();
  let status: Status;
  try {
    if (command.kind === 'exec') {
      const code = await backend.exec(command.params, io);
      status = code === 0 ? successStatus() : exitCodeStatus(code);
      log.debug('exec finished', { containerId: id, exitCode: code, durationMs: Math.round(performance.now() - started) });
    } else {
      await backend.attach(command.params, io);
      status = successStatus();
      log.debug('attach finished', { containerId: id, durationMs: Math.round(performance.now() - started) });
    }
  } catch (err) {
    const what = command.kind === 'exec' ? 'error executing command in container' : 'error attaching to container';
    const message = `${what}: ${messageOf(err)}`;
    if (!channels.signal.aborted) log.warn(`${command.kind} failed`, { containerId: id, error: message });
    status = internalErrorStatus(message);
  }
  resize?.end();
  if (channels.signal.aborted) {
    await channels.close();
    return;
  }
  // All output first, then the status: the client has everything once it learns the outcome.
  await settleWrites([channels.stdout, channels.stderr]);
  channels.error.end(encodeStatus(status, channels.version));
  await settleWrites([channels.error]);
  await channels.close();
}
