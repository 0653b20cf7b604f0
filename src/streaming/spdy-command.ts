/**
 * exec/attach over SPDY: the client opens one stream per standard stream, tagged by the `streamtype`
 * header (error, stdin, stdout, stderr, resize). The server waits for
 * 1 + stdin + stdout + stderr + (tty && version >= 3 ? 1 : 0) streams, counted from the stored CRI
 * request, each answered with SYN_REPLY, for at most the stream creation timeout; then it runs the
 * session (remotecommand.ts).
 */
import type { Duplex, Readable, Writable } from 'node:stream';
import type { Logger } from '../common/logger.js';
import type { StreamingBackend } from './backend.js';
import { serveCommand, type CommandSession } from './remotecommand.js';
import { SpdySession, type SpdyStream } from './spdy.js';

type StreamType = 'error' | 'stdin' | 'stdout' | 'stderr' | 'resize';

export interface SpdyCommandOptions {
  version: number;
  idleTimeoutMs: number;
  streamCreationTimeoutMs: number;
  head: Buffer;
  backend: StreamingBackend;
  log: Logger;
}

/** Runs one exec/attach on an upgraded socket; returns the session (for shutdown). */
export function serveSpdyCommand(transport: Duplex, command: CommandSession, options: SpdyCommandOptions): SpdySession {
  const { stdin, stdout, stderr, tty } = command.params;
  const resize = tty && options.version >= 3;
  const wanted: Record<StreamType, boolean> = { error: true, stdin, stdout, stderr, resize };
  const expected = Object.values(wanted).filter(Boolean).length;
  const streams: Partial<Record<StreamType, SpdyStream>> = {};
  let received = 0;
  const { promise: ready, resolve: allReceived } = Promise.withResolvers<void>();

  const onStream = (stream: SpdyStream) => {
    const type = stream.header('streamtype') as StreamType;
    if (!(type in wanted) || streams[type]) {
      options.log.debug('refusing stream', { streamType: type, streamId: stream.id });
      stream.refuse();
      return;
    }
    streams[type] = stream;
    stream.reply();
    // A type the session did not ask for is accepted (clients fail on a refused stream) but unused.
    if (!wanted[type]) {
      stream.resume();
      return;
    }
    // Streams we only write to: discard whatever the client sends so they never pause the connection.
    if (type === 'error' || type === 'stdout' || type === 'stderr') stream.resume();
    received++;
    if (received === expected) allReceived();
  };

  const session = new SpdySession(transport, {
    onStream,
    idleTimeoutMs: options.idleTimeoutMs,
    head: options.head,
    onProblem: (problem) => options.log.warn('streaming connection closed', { problem }),
    // error, stdin, stdout, stderr, resize: one of each at most (duplicates are refused above).
    maxStreams: 5,
  });

  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), options.streamCreationTimeoutMs);
  });
  const gone = new Promise<'gone'>((resolve) => session.onClose(() => resolve('gone')));

  void Promise.race([ready.then(() => 'ready' as const), timedOut, gone]).then(async (outcome) => {
    clearTimeout(timer);
    if (outcome === 'gone') return;
    if (outcome === 'timeout') {
      options.log.warn('timed out waiting for client to create streams', { expected, received });
      await session.close();
      return;
    }
    await serveCommand(
      command,
      {
        version: options.version,
        stdin: wanted.stdin ? (streams.stdin as Readable) : undefined,
        stdout: wanted.stdout ? (streams.stdout as Writable) : undefined,
        stderr: wanted.stderr ? (streams.stderr as Writable) : undefined,
        resize: wanted.resize ? streams.resize : undefined,
        error: streams.error!,
        signal: session.signal,
        close: () => session.close(),
      },
      options.backend,
      options.log,
    );
  });
  return session;
}
