/**
 * The benchmark's side of lib/daemon-probe.ts: signal the daemon (SIGUSR2: a full garbage collection,
 * then one JSON line of its heap's figures appended to the probe file) and read the line it wrote.
 */
import { readFile } from 'node:fs/promises';
import type { ProbeSample } from './daemon-probe.js';

/** The module a daemon loads (`NODE_OPTIONS=--import=…`) to answer probe(). */
export const PROBE_MODULE = new URL('./daemon-probe.js', import.meta.url).pathname;

/** Signals the daemon's probe and waits for the line it appends. */
export async function probe(pid: number, file: string): Promise<ProbeSample> {
  const lines = async () => (await readFile(file, 'utf8').catch(() => '')).split('\n').filter(Boolean);
  const seen = (await lines()).length;
  process.kill(pid, 'SIGUSR2');
  const deadline = Date.now() + 120_000;
  for (;;) {
    const all = await lines();
    if (all.length > seen) return JSON.parse(all[all.length - 1]!) as ProbeSample;
    if (Date.now() > deadline) throw new Error(`the daemon's probe did not answer within 120 s (${file})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
