/**
 * exec/attach and v4 port-forward over WebSocket channels (ws-channels.ts). exec/attach: channels
 * 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize; an empty message on the lowest writable channel tells
 * the client the connection is up; the status is JSON from v4 on, text before; then a normal closure.
 */
import type { WebSocket } from 'ws';
import type { Logger } from '../common/logger.js';
import { messageOf } from '../common/errors.js';
import type { StreamingBackend } from './backend.js';
import { commandProtocolVersion, isBase64Protocol } from './negotiate.js';
import { serveCommand, type CommandSession } from './remotecommand.js';
import { ChannelConnection } from './ws-channels.js';

export interface WsServeOptions {
  idleTimeoutMs: number;
  backend: StreamingBackend;
  log: Logger;
}

const STDIN = 0;
const STDOUT = 1;
const STDERR = 2;
const ERROR = 3;
const RESIZE = 4;

/** Runs one exec/attach on an accepted WebSocket whose negotiated subprotocol is `protocol`. */
export function serveWsCommand(ws: WebSocket, protocol: string, command: CommandSession, options: WsServeOptions): ChannelConnection {
  const { stdin, stdout, stderr, tty } = command.params;
  const version = commandProtocolVersion(protocol);
  const conn = new ChannelConnection(ws, {
    base64: isBase64Protocol(protocol),
    closeSignals: version >= 5,
    channels: [
      { read: stdin, write: false },
      { read: false, write: stdout },
      { read: false, write: stderr },
      { read: false, write: true },
      { read: true, write: false },
    ],
    idleTimeoutMs: options.idleTimeoutMs,
    onProblem: (problem) => options.log.warn('streaming connection closed', { problem }),
  });
  void conn.send(stdout ? STDOUT : stderr ? STDERR : ERROR, Buffer.alloc(0));
  const c = conn.channels;
  void serveCommand(
    command,
    {
      version,
      stdin: stdin ? c[STDIN] : undefined,
      stdout: stdout ? c[STDOUT] : undefined,
      stderr: stderr ? c[STDERR] : undefined,
      resize: tty ? c[RESIZE] : undefined,
      error: c[ERROR]!,
      signal: conn.signal,
      close: () => conn.close(),
    },
    options.backend,
    options.log,
  );
  return conn;
}

/**
 * v4 port-forward over channels, for the ports stored with the session: one connection per port, data
 * on channel 2i and errors (text) on 2i+1, each channel opened with the port as u16 little-endian.
 */
export function serveWsPortForward(
  ws: WebSocket,
  protocol: string,
  podSandboxId: string,
  ports: number[],
  options: WsServeOptions,
): ChannelConnection {
  const conn = new ChannelConnection(ws, {
    base64: isBase64Protocol(protocol),
    closeSignals: false,
    channels: ports.flatMap(() => [
      { read: true, write: true },
      { read: false, write: true },
    ]),
    idleTimeoutMs: options.idleTimeoutMs,
    onProblem: (problem) => options.log.warn('port-forward connection closed', { problem }),
  });
  const forwards = ports.map(async (port, i) => {
    const data = conn.channels[2 * i]!;
    const error = conn.channels[2 * i + 1]!;
    const portBytes = Buffer.alloc(2);
    portBytes.writeUInt16LE(port);
    await Promise.all([conn.send(data.index, portBytes), conn.send(error.index, portBytes)]);
    try {
      await options.backend.portForward(podSandboxId, port, data, conn.signal);
    } catch (err) {
      options.log.warn('port forward failed', { podSandboxId, port, error: messageOf(err) });
      await conn.send(error.index, Buffer.from(`error forwarding port ${port} to pod ${podSandboxId}, uid : ${messageOf(err)}`));
    }
  });
  void Promise.all(forwards).then(() => conn.close());
  return conn;
}
