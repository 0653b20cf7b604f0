/**
 * A worker thread for the transport tests: opens `clients` connections to the CRI socket at once, each
 * sending a Version call as soon as it is made (not waiting for the server's SETTINGS, as a client
 * started fresh does), and posts how each ended: 'ok', 'goaway' (its connection was told to go before
 * the call was answered), or the status and reset code. On an event loop of its own, as separate
 * client processes would be: the daemon's loop sees the connections arrive faster than it serves them.
 */
import http2 from 'node:http2';
import net from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';

const { socket, clients } = workerData as { socket: string; clients: number };

function versionOnNewConnection(): Promise<string> {
  return new Promise((resolve) => {
    const session = http2.connect('http://localhost', { createConnection: () => net.connect(socket) });
    let goaway = false;
    let outcome: string | undefined;
    const end = (what: string) => {
      outcome ??= what;
      session.destroy();
      resolve(outcome);
    };
    session.on('error', (err: NodeJS.ErrnoException) => end(`connection error ${err.code ?? err.message}`));
    session.once('goaway', () => (goaway = true));
    const req = session.request({ ':method': 'POST', ':path': '/runtime.v1.RuntimeService/Version', 'content-type': 'application/grpc', te: 'trailers' });
    let grpcStatus: string | undefined;
    req.on('error', () => {});
    req.on('response', (h) => (grpcStatus ??= h['grpc-status'] as string | undefined));
    req.on('trailers', (t) => (grpcStatus = t['grpc-status'] as string | undefined));
    req.resume();
    req.once('close', () => end(grpcStatus === '0' ? 'ok' : goaway ? 'goaway' : `grpc-status ${grpcStatus} rst ${req.rstCode}`));
    req.end(Buffer.alloc(5)); // an empty VersionRequest
  });
}

const outcomes = await Promise.all(Array.from({ length: clients }, versionOnNewConnection));
const tally: Record<string, number> = {};
for (const o of outcomes) tally[o] = (tally[o] ?? 0) + 1;
parentPort!.postMessage(tally);
