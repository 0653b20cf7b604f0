/**
 * conmon's sync and attach pipes (fds 3 and 5): newline-delimited JSON messages such as `{"pid": 12}`,
 * `{"pid": -1, "message": "..."}`, `{"exit_code": 3}` or, with `--api-version 1`, `{"data": 12}`.
 */
import type { Readable } from 'node:stream';

/** One message from conmon. `value` is the number under the pid/exit_code/data key. */
export interface SyncMessage {
  value: number;
  message?: string;
}

/** Reads messages one at a time from a conmon pipe. */
export class SyncPipeReader {
  private buffered = '';
  private readonly queue: SyncMessage[] = [];
  private ended = false;
  private failure: Error | undefined;
  private wake: (() => void) | undefined;

  constructor(private readonly stream: Readable) {
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => this.onData(chunk));
    stream.on('end', () => this.finish());
    stream.on('close', () => this.finish());
    stream.on('error', (err) => {
      this.failure = err;
      this.finish();
    });
  }

  /**
   * The next message; undefined when conmon closed the pipe first. Rejects with `onTimeout()` when
   * nothing arrives within `timeoutMs`.
   */
  async next(timeoutMs: number, onTimeout: () => Error): Promise<SyncMessage | undefined> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const message = this.queue.shift();
      if (message) return message;
      if (this.ended) {
        if (this.failure && (this.failure as NodeJS.ErrnoException).code !== 'ECONNRESET') throw this.failure;
        return undefined;
      }
      const left = deadline - Date.now();
      if (left <= 0) throw onTimeout();
      await new Promise<void>((resolve) => {
        // setTimeout overflows above 2^31 ms; waking early just loops.
        const timer = setTimeout(resolve, Math.min(left, 2 ** 30));
        this.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.wake = undefined;
    }
  }

  /** Stops reading and releases the pipe. */
  close(): void {
    this.stream.destroy();
  }

  private onData(chunk: string): void {
    this.buffered += chunk;
    let newline: number;
    while ((newline = this.buffered.indexOf('\n')) >= 0) {
      const line = this.buffered.slice(0, newline).trim();
      this.buffered = this.buffered.slice(newline + 1);
      if (line) this.queue.push(parseSyncLine(line));
    }
    this.wake?.();
  }

  private finish(): void {
    if (this.ended) return;
    // A last message without its newline still counts.
    const rest = this.buffered.trim();
    this.buffered = '';
    if (rest) this.queue.push(parseSyncLine(rest));
    this.ended = true;
    this.wake?.();
  }
}

/** Parses one line conmon wrote; a line that is not its JSON becomes a failure message. */
export function parseSyncLine(line: string): SyncMessage {
  try {
    const record = JSON.parse(line) as Record<string, unknown>;
    const raw = record['pid'] ?? record['exit_code'] ?? record['data'];
    const value = typeof raw === 'number' ? raw : -1;
    const message = typeof record['message'] === 'string' ? record['message'] : undefined;
    return message === undefined ? { value } : { value, message };
  } catch {
    return { value: -1, message: `unexpected message from conmon: ${line}` };
  }
}
