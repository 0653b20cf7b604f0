/**
 * A worker thread for the HTTP/2 attack tests: Version calls one after another on a connection of its
 * own until told to stop, then posts the slowest call's time in ms. On an event loop of its own, so what
 * it measures is the daemon, not the attacking client's frame writing on the test's loop.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { criClients } from '../helpers/cri-client.js';

const { socket } = workerData as { socket: string };
const clients = criClients(socket);
let running = true;
let slowest = 0;
parentPort!.once('message', () => (running = false));
try {
  while (running) {
    const started = performance.now();
    await clients.runtime.version({ version: 'v1' });
    slowest = Math.max(slowest, performance.now() - started);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
} finally {
  clients.close();
}
parentPort!.postMessage(slowest);
