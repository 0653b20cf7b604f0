/**
 * Attaching to conmon's attach socket `<attach dir>/<id>/attach` (SOCK_SEQPACKET; each packet conmon
 * sends is one pipe byte, 2 = stdout or 3 = stderr, then up to 8 KiB of output; bytes written to it
 * go to the process's stdin). Node cannot open SOCK_SEQPACKET sockets, so a small relay program
 * (src/monitor/attach-relay.c) connects and frames each packet with its length over a pipe; socat
 * was measured to merge packets on the way to Node, losing the pipe bytes.
 */
import { existsSync } from 'node:fs';
import { once } from 'node:events';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { messageOf } from '../common/errors.js';
import { installPath } from '../common/install-dir.js';
import type { Logger } from '../common/logger.js';
import { startProcess } from '../platform/processes.js';
import { resizeTerminal } from './ctl.js';
import { MonitorError } from './errors.js';

/** Where `make build` puts the relay. */
export const DEFAULT_RELAY_PATH = installPath('dist/libexec/stove-attach-relay');

const STDOUT_PIPE = 2;
const STDERR_PIPE = 3;

/** The caller's side of a session. Output streams are written to but never ended here. */
export interface SessionIo {
  /** Bytes for the process's stdin; its end closes the process's stdin (unless conmon keeps it open). */
  stdin?: Readable;
  stdout?: Writable;
  /** Never written for a terminal: a tty has only one output stream. */
  stderr?: Writable;
}

/** A live connection to an attach socket. */
export interface RelaySession {
  /** Resolves when conmon closed the socket (the process is gone) or close() was called, after all output was written. */
  readonly done: Promise<void>;
  /** Disconnects now. */
  close(): void;
}

/** Connects to an attach socket through the relay; resolves once connected. */
export async function openRelay(relayPath: string, socketPath: string, io: SessionIo, id: string, log: Logger): Promise<RelaySession> {
  if (!existsSync(relayPath)) {
    throw new MonitorError('Internal', `attach relay ${relayPath} is missing (run make build)`, id);
  }
  const args = io.stdin ? [socketPath] : ['-n', socketPath];
  const relay = startProcess(relayPath, args, { stdio: [io.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'], directPipes: true });
  let stderrText = '';
  relay.stderr!.on('data', (chunk: Buffer) => (stderrText += chunk.toString('utf8')));
  const exited = once(relay, 'close').catch(() => undefined);

  let signalConnected!: () => void;
  const connected = new Promise<void>((resolveConnected) => (signalConnected = resolveConnected));
  const pump = pumpFrames(relay.stdout!, io, signalConnected).catch((err) => {
    log.warn('attach output copy failed', { id, error: messageOf(err) });
  });

  const outcome = await Promise.race([connected.then(() => 'connected' as const), exited.then(() => 'exited' as const)]);
  if (outcome === 'exited') {
    const why = stderrText.trim() || `relay exited with status ${relay.exitCode}`;
    const gone = /No such file|Connection refused/.test(why);
    throw new MonitorError(gone ? 'FailedPrecondition' : 'Internal', `cannot attach to "${id}": ${gone ? 'its monitor is not running' : why}`, id);
  }
  if (io.stdin && relay.stdin) connectStdin(io.stdin, relay.stdin, exited);
  const done = Promise.all([exited, pump]).then(() => {
    if (io.stdin && relay.stdin) io.stdin.unpipe(relay.stdin);
  });
  return {
    done,
    close: () => {
      if (relay.exitCode === null && relay.signalCode === null) relay.kill('SIGTERM');
    },
  };
}

/** Copies the caller's stdin to the relay; the relay half-closes the socket at its end. */
function connectStdin(stdin: Readable, relayStdin: Writable, exited: Promise<unknown>): void {
  relayStdin.on('error', () => {}); // EPIPE once the relay is gone: nothing left to feed
  stdin.pipe(relayStdin);
  void exited.then(() => {
    stdin.unpipe(relayStdin);
    relayStdin.destroy();
  });
}

/** Reads length-prefixed frames from the relay and writes each packet's payload to its stream. */
async function pumpFrames(frames: Readable, io: SessionIo, onConnected: () => void): Promise<void> {
  let pending: Buffer = Buffer.alloc(0);
  let connected = false;
  for await (const chunk of frames as AsyncIterable<Buffer>) {
    pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
    while (pending.length >= 4) {
      const length = pending.readUInt32BE(0);
      if (pending.length < 4 + length) break;
      const packet = pending.subarray(4, 4 + length);
      pending = pending.subarray(4 + length);
      if (!connected) {
        connected = true;
        onConnected();
        if (length === 0) continue;
      }
      await deliver(packet, io);
    }
  }
}

/** Writes one conmon packet to stdout or stderr, honouring backpressure. */
async function deliver(packet: Buffer, io: SessionIo): Promise<void> {
  if (packet.length < 2) return;
  const target = packet[0] === STDOUT_PIPE ? io.stdout : packet[0] === STDERR_PIPE ? io.stderr : undefined;
  if (!target || target.destroyed || target.writableEnded) return;
  if (!target.write(packet.subarray(1))) {
    await Promise.race([once(target, 'drain'), once(target, 'close'), once(target, 'error')]);
  }
}

/** An attach to a running container. */
export interface AttachSession {
  /** Resolves when the container's output ended (it exited) or close() was called. */
  readonly done: Promise<void>;
  /** Resizes the container's terminal (only meaningful with tty). */
  resize(width: number, height: number): Promise<void>;
  /** Detaches; with stdin attached and without `--leave-stdin-open`, conmon closes the container's stdin. */
  close(): void;
}

/** Attaches to the container `id` through `<attachDir>/<id>/attach`. */
export async function attachContainer(
  attachDir: string,
  relayPath: string,
  id: string,
  io: SessionIo,
  log: Logger,
): Promise<AttachSession> {
  const link = join(attachDir, id);
  const relay = await openRelay(relayPath, join(link, 'attach'), io, id, log);
  return {
    done: relay.done,
    resize: (width, height) => resizeTerminal(join(link, 'ctl'), width, height, id),
    close: () => relay.close(),
  };
}
