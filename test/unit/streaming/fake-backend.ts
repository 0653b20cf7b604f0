/**
 * A scripted StreamingBackend for protocol tests (no processes). exec interprets `cmd`:
 *   echo ARGS…        writes the args joined by spaces to stdout
 *   err TEXT          writes TEXT to stderr
 *   cat               copies stdin to stdout until stdin ends
 *   count             reads stdin to its end, writes the byte count
 *   big N             writes N bytes ('x') to stdout, honouring backpressure
 *   exit N            exit code N
 *   fail MSG          rejects (the command could not run)
 *   hang              waits for the abort signal
 *   sizes N           waits for N terminal sizes, writes them as WxH lines
 * Several commands can be chained with ';' as separate argv elements: ['echo', 'a', ';', 'exit', '3'].
 */
import type { Duplex, Readable, Writable } from 'node:stream';
import type { AttachParams, ExecParams, StreamingBackend, StreamingLookup, StreamIO, TerminalSize } from '../../../src/streaming/backend.js';
import { forwardToLoopback } from '../../helpers/host-backend.js';

function write(stream: Writable | undefined, data: string | Buffer): Promise<void> {
  if (!stream) return Promise.resolve();
  return new Promise((resolve) => {
    if (stream.write(data)) resolve();
    else stream.once('drain', resolve);
  });
}

async function readAll(stream: Readable | undefined): Promise<Buffer> {
  if (!stream) return Buffer.alloc(0);
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

export class FakeBackend implements StreamingBackend, StreamingLookup {
  readonly execs: { params: ExecParams; io: StreamIO }[] = [];
  readonly attaches: { params: AttachParams; io: StreamIO }[] = [];
  readonly aborted: string[] = [];
  readonly forwards: { pod: string; port: number }[] = [];
  /** Terminal sizes as the `sizes` command took them. */
  readonly sizes: TerminalSize[] = [];
  readonly containers = new Set(['ctr1']);
  readonly pods = new Set(['pod1']);
  /** attach: what the "container" writes, then how it ends. */
  attachScript: (io: StreamIO) => Promise<void> = async (io) => {
    await write(io.stdout, 'attached\n');
    if (io.stdin) await write(io.stdout, await readAll(io.stdin));
  };

  async container(id: string): Promise<string | undefined> {
    return this.containers.has(id) ? id : undefined;
  }

  async sandbox(id: string): Promise<string | undefined> {
    return this.pods.has(id) ? id : undefined;
  }

  async exec(params: ExecParams, io: StreamIO): Promise<number> {
    this.execs.push({ params, io });
    let code = 0;
    const steps: string[][] = [[]];
    for (const arg of params.cmd) {
      if (arg === ';') steps.push([]);
      else steps.at(-1)!.push(arg);
    }
    for (const [name, ...args] of steps) {
      switch (name) {
        case 'echo':
          await write(io.stdout, args.join(' '));
          break;
        case 'err':
          await write(io.stderr, args.join(' '));
          break;
        case 'cat':
          if (io.stdin) for await (const c of io.stdin) await write(io.stdout, c as Buffer);
          break;
        case 'count':
          await write(io.stdout, String((await readAll(io.stdin)).length));
          break;
        case 'big': {
          let left = Number(args[0]);
          const chunk = Buffer.alloc(64 * 1024, 'x');
          while (left > 0 && !io.signal.aborted) {
            const n = Math.min(left, chunk.length);
            await write(io.stdout, chunk.subarray(0, n));
            left -= n;
          }
          break;
        }
        case 'exit':
          code = Number(args[0]);
          break;
        case 'fail':
          throw new Error(args.join(' '));
        case 'hang':
          await new Promise<void>((resolve) =>
            io.signal.addEventListener(
              'abort',
              () => {
                this.aborted.push(params.cmd.join(' '));
                resolve();
              },
              { once: true },
            ),
          );
          return 137;
        case 'sizes': {
          const want = Number(args[0]);
          const got: TerminalSize[] = [];
          if (io.resize) {
            for await (const size of io.resize) {
              got.push(size);
              this.sizes.push(size);
              if (got.length === want) break;
            }
          }
          await write(io.stdout, got.map((s) => `${s.width}x${s.height}\n`).join(''));
          break;
        }
        default:
          throw new Error(`fake backend: unknown command ${name}`);
      }
    }
    return code;
  }

  async attach(params: AttachParams, io: StreamIO): Promise<void> {
    this.attaches.push({ params, io });
    await this.attachScript(io);
  }

  portForward(pod: string, port: number, stream: Duplex, signal: AbortSignal): Promise<void> {
    this.forwards.push({ pod, port });
    return forwardToLoopback(port, stream, signal);
  }
}
