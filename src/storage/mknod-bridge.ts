/**
 * mknod for the unpack worker. Extraction there is synchronous by design (unpack-worker.ts), and a
 * process started from a worker thread still forks the whole daemon; so the worker asks the main
 * thread, which makes the node asynchronously (platform/mknod.ts: a mount helper round trip), and
 * blocks on a shared buffer until the answer is there. Device nodes and fifos are rare in layers
 * (whiteouts are hardlinks to one template), so the wait is too.
 */
import type { MessagePort } from 'node:worker_threads';
import { makeNode, type NodeSpec } from '../platform/mknod.js';

export interface MknodRequest {
  type: 'mknod';
  path: string;
  node: NodeSpec;
  /** [state (PENDING, DONE, FAILED), length of the error text], then the error text (JSON). */
  answer: SharedArrayBuffer;
}

const PENDING = 0;
const DONE = 1;
const FAILED = 2;
const ANSWER_BYTES = 4096;
const HEADER_BYTES = 8;
/** Longer than makeNode can take (the mount helper's own timeout is 60 s). */
const WAIT_MS = 120_000;

/** Worker side: has the main thread make the node, waiting for it; throws its error. */
export function mknodFromWorker(port: MessagePort, path: string, node: NodeSpec): void {
  const answer = new SharedArrayBuffer(ANSWER_BYTES);
  const state = new Int32Array(answer, 0, 2);
  const request: MknodRequest = { type: 'mknod', path, node, answer };
  port.postMessage(request);
  if (Atomics.wait(state, 0, PENDING, WAIT_MS) === 'timed-out') throw new Error(`mknod ${path}: no answer within ${WAIT_MS / 1000}s`);
  if (Atomics.load(state, 0) === DONE) return;
  const text = Buffer.from(answer, HEADER_BYTES, state[1]).toString('utf8');
  const { message, code } = JSON.parse(text) as { message: string; code?: string };
  throw Object.assign(new Error(message), { code });
}

/** Main-thread side: makes the node and wakes the worker. */
export async function answerMknod(request: MknodRequest): Promise<void> {
  const state = new Int32Array(request.answer, 0, 2);
  try {
    await makeNode(request.path, request.node);
    Atomics.store(state, 0, DONE);
  } catch (err) {
    const { message, code } = err as NodeJS.ErrnoException;
    let text = Buffer.from(JSON.stringify({ message, code }));
    if (text.length > ANSWER_BYTES - HEADER_BYTES) text = Buffer.from(JSON.stringify({ message: message.slice(0, 500), code }));
    text.copy(Buffer.from(request.answer, HEADER_BYTES));
    state[1] = text.length;
    Atomics.store(state, 0, FAILED);
  }
  Atomics.notify(state, 0);
}
