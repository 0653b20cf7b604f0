/**
 * mknod for the unpack worker: a worker thread blocks while the main thread makes the node, and gets
 * the node or the error (message and errno code) back.
 */
import assert from 'node:assert/strict';
import { lstat, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { answerMknod, type MknodRequest } from '../../../src/storage/mknod-bridge.js';

/** Runs mknodFromWorker in a worker thread for each path; resolves with what each call threw (or null). */
function mknodInWorker(paths: string[]): Promise<({ message: string; code?: string } | null)[]> {
  const bridge = new URL('../../../src/storage/mknod-bridge.js', import.meta.url).href;
  const script = `
    const { parentPort, workerData } = await import('node:worker_threads');
    const { mknodFromWorker } = await import(${JSON.stringify(bridge)});
    const results = workerData.map((path) => {
      try {
        mknodFromWorker(parentPort, path, { type: 'p', mode: 0o640, major: 0, minor: 0 });
        return null;
      } catch (err) {
        return { message: err.message, code: err.code };
      }
    });
    parentPort.postMessage({ type: 'results', results });`;
  const worker = new Worker(script, { eval: true, workerData: paths });
  return new Promise((resolve, reject) => {
    worker.on('message', (msg: MknodRequest | { type: 'results'; results: ({ message: string; code?: string } | null)[] }) => {
      if (msg.type === 'mknod') void answerMknod(msg);
      else void worker.terminate().then(() => resolve(msg.results));
    });
    worker.once('error', reject);
  });
}

describe('storage/mknod-bridge', function () {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stove-mknod-bridge-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('makes the node on the main thread while the worker waits, and hands back the error of a failed one', async () => {
    const pipe = join(dir, 'pipe');
    const [made, again, nowhere] = await mknodInWorker([pipe, pipe, join(dir, 'missing', 'pipe')]);
    assert.equal(made, null);
    const st = await lstat(pipe);
    assert.ok(st.isFIFO());
    assert.equal(st.mode & 0o777, 0o640);
    assert.match(again!.message, /^mknod .*pipe: .*File exists/);
    assert.equal(again!.code, 'EEXIST');
    assert.match(nowhere!.message, /No such file or directory/);
  });
});
