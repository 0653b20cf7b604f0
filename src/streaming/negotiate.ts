/**
 * HTTP-level pieces of the streaming protocols: which upgrade a request asks for, subprotocol
 * negotiation (the server takes the first protocol in the client's order that it supports, as
 * apimachinery's httpstream.Handshake and wsstream do), and raw HTTP responses on an upgrade socket.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';

export const PROTOCOL_HEADER = 'x-stream-protocol-version';

/** remotecommand over SPDY, newest first. v5 behaves as v4 over SPDY (CLOSE is WebSocket-only). */
export const SPDY_COMMAND_PROTOCOLS = [
  'v5.channel.k8s.io',
  'v4.channel.k8s.io',
  'v3.channel.k8s.io',
  'v2.channel.k8s.io',
  'channel.k8s.io',
];
export const SPDY_PORTFORWARD_PROTOCOLS = ['portforward.k8s.io'];

/** remotecommand over WebSocket; '' is a client that names no subprotocol. */
export const WS_COMMAND_PROTOCOLS = [
  'v5.channel.k8s.io',
  'v4.channel.k8s.io',
  'v4.base64.channel.k8s.io',
  'channel.k8s.io',
  'base64.channel.k8s.io',
];
/** The SPDY-over-WebSocket port-forward tunnel that client-go uses for `--transport websocket`. */
export const WS_SPDY_TUNNEL_PROTOCOL = 'SPDY/3.1+portforward.k8s.io';
export const WS_PORTFORWARD_PROTOCOLS = [WS_SPDY_TUNNEL_PROTOCOL, 'v4.channel.k8s.io', 'v4.base64.channel.k8s.io'];

/** The remotecommand version (1–5) of a negotiated protocol name. */
export function commandProtocolVersion(protocol: string): number {
  const m = /^v(\d)\./.exec(protocol);
  return m ? Number(m[1]) : 1;
}

export function isBase64Protocol(protocol: string): boolean {
  return protocol.includes('base64.');
}

/** Values of a possibly repeated, comma-joined header (Node joins repeats with ", "). */
export function headerValues(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  const all = Array.isArray(value) ? value : [value];
  return all.flatMap((v) => v.split(',')).map((v) => v.trim()).filter((v) => v.length > 0);
}

/** The first of the client's protocols that the server supports. */
export function negotiate(client: string[], server: string[]): string | undefined {
  return client.find((p) => server.includes(p));
}

export function wantsWebSocket(req: IncomingMessage): boolean {
  return (req.headers.upgrade ?? '').toLowerCase() === 'websocket' && headerValues(req.headers.connection).some((v) => v.toLowerCase() === 'upgrade');
}

/** apimachinery's check: Connection contains "upgrade" and Upgrade contains "spdy/3.1". */
export function wantsSpdy(req: IncomingMessage): boolean {
  return (
    headerValues(req.headers.connection).some((v) => v.toLowerCase() === 'upgrade') &&
    (req.headers.upgrade ?? '').toLowerCase().includes('spdy/3.1')
  );
}

const REASONS: Record<number, string> = {
  400: 'Bad Request',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  500: 'Internal Server Error',
};

/** Writes a plain-text HTTP error on a raw (upgrade) socket and closes it. */
export function rejectUpgrade(socket: Duplex, code: number, message: string, headers: [string, string][] = []): void {
  const body = message + '\n';
  const lines = [
    `HTTP/1.1 ${code} ${REASONS[code] ?? 'Error'}`,
    'Content-Type: text/plain; charset=utf-8',
    'X-Content-Type-Options: nosniff',
    `Content-Length: ${Buffer.byteLength(body)}`,
    'Connection: close',
    ...headers.map(([k, v]) => `${k}: ${v}`),
  ];
  // Destroy once written: the socket is half-open-capable and a client may never close its side.
  socket.once('finish', () => socket.destroy());
  socket.end(lines.join('\r\n') + '\r\n\r\n' + body);
}

/** The 101 that completes a SPDY upgrade. */
export function acceptSpdyUpgrade(socket: Duplex, protocol: string): void {
  socket.write(
    'HTTP/1.1 101 Switching Protocols\r\n' +
      'Connection: Upgrade\r\n' +
      'Upgrade: SPDY/3.1\r\n' +
      `X-Stream-Protocol-Version: ${protocol}\r\n\r\n`,
  );
}
