/**
 * Byte copying between a port-forward stream and a TCP connection, for StreamingBackend.portForward
 * implementations: both directions with half-close (the client's FIN ends our writes to the
 * connection; the connection's FIN ends the stream), settled when the connection is closed.
 */
import type { Duplex } from 'node:stream';

/**
 * Copies `client` → `conn` and `conn` → `client`. Resolves once the connection has closed cleanly or
 * the client stream went away (then the connection is destroyed); rejects with the connection's error
 * (ECONNRESET, EPIPE, …). `signal` destroys the connection and resolves.
 */
export function relay(client: Duplex, conn: Duplex, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let settled = false;
    const settle = (err?: Error) => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener('abort', onAbort);
      client.unpipe(conn);
      client.off('close', onClientClose);
      if (err) {
        conn.destroy();
        reject(err);
      } else resolve();
    };
    const onAbort = () => {
      conn.destroy();
      settle();
    };
    const onClientClose = () => {
      conn.destroy();
      settle();
    };
    if (signal?.aborted) return onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });
    conn.on('error', (err: Error) => settle(err));
    conn.on('close', () => settle());
    client.on('close', onClientClose);
    client.pipe(conn);
    conn.pipe(client);
  });
}
