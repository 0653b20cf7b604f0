/**
 * Loaded into the daemon by memory.ts (`NODE_OPTIONS=--import=…/daemon-probe.js`, with the path of a
 * file in STOVE_BENCH_PROBE): on SIGUSR2 it runs a full garbage collection, then appends one JSON line
 * of the V8 heap's and Node's own figures to that file, so the benchmark can tell the JavaScript heap
 * from native memory after every sample, and a heap snapshot when asked. Never part of the daemon itself.
 *
 * With STOVE_BENCH_CPU_PROF naming a directory (node-density-kubelet.ts), SIGWINCH starts V8's CPU
 * profiler in the daemon and the next SIGWINCH stops it and writes the profile there as
 * `<pid>-<time>.cpuprofile` (what `node --cpu-prof` writes, for a window of the daemon's life
 * instead of all of it).
 */
import { appendFileSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';
import { Session } from 'node:inspector/promises';
import { join } from 'node:path';
import { getHeapCodeStatistics, getHeapSpaceStatistics, getHeapStatistics, setFlagsFromString, writeHeapSnapshot } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** One probe line; memory in bytes. */
export interface ProbeSample {
  pid: number;
  /** process.memoryUsage() after the collection. */
  usage: NodeJS.MemoryUsage;
  /** Committed and used bytes per V8 space. */
  spaces: Record<string, { committed: number; used: number }>;
  /** V8's malloc'd memory (zones, compiler), its peak, and the bytes of code and bytecode. */
  mallocedMemory: number;
  peakMallocedMemory: number;
  codeAndMetadata: number;
  bytecodeAndMetadata: number;
  nativeContexts: number;
  detachedContexts: number;
  /** Active libuv handles and requests by kind (timers, sockets, pipes, fs requests…). */
  resources: Record<string, number>;
}

const out = process.env.STOVE_BENCH_PROBE;
// Only the daemon's main thread: unpack workers load it too, and signals never reach them.
if (out && isMainThread) {
  // V8 flags to try on the daemon (memory.ts --v8-flags): NODE_OPTIONS refuses most of them.
  if (process.env.STOVE_BENCH_V8_FLAGS) setFlagsFromString(process.env.STOVE_BENCH_V8_FLAGS);
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as (options?: { type: 'major'; execution: 'sync' }) => void;
  process.on('SIGUSR2', () => {
    gc({ type: 'major', execution: 'sync' });
    const heap = getHeapStatistics();
    const code = getHeapCodeStatistics();
    const resources: Record<string, number> = {};
    for (const kind of process.getActiveResourcesInfo()) resources[kind] = (resources[kind] ?? 0) + 1;
    const sample: ProbeSample = {
      pid: process.pid,
      usage: process.memoryUsage(),
      spaces: Object.fromEntries(getHeapSpaceStatistics().map((s) => [s.space_name, { committed: s.physical_space_size, used: s.space_used_size }])),
      mallocedMemory: heap.malloced_memory,
      peakMallocedMemory: heap.peak_malloced_memory,
      codeAndMetadata: code.code_and_metadata_size,
      bytecodeAndMetadata: code.bytecode_and_metadata_size,
      nativeContexts: heap.number_of_native_contexts,
      detachedContexts: heap.number_of_detached_contexts,
      resources,
    };
    // memory.ts --snapshots: a heap snapshot where `<probe file>.snapshot` names, before the line.
    if (existsSync(`${out}.snapshot`)) {
      writeHeapSnapshot(readFileSync(`${out}.snapshot`, 'utf8'));
      rmSync(`${out}.snapshot`);
    }
    appendFileSync(out, `${JSON.stringify(sample)}\n`);
    // A mark in the daemon's output (memory.ts --dump keeps it), between what V8 traced before and after.
    process.stdout.write(`stove-bench-probe ${Date.now()}\n`);
  });
}

const profileDir = process.env.STOVE_BENCH_CPU_PROF;
if (profileDir && isMainThread) {
  let session: Session | undefined;
  process.on('SIGWINCH', () => {
    void (async () => {
      if (!session) {
        session = new Session();
        session.connect();
        await session.post('Profiler.enable');
        await session.post('Profiler.setSamplingInterval', { interval: 1000 });
        await session.post('Profiler.start');
        return;
      }
      const { profile } = await session.post('Profiler.stop');
      session.disconnect();
      session = undefined;
      writeFileSync(join(profileDir, `${process.pid}-${Date.now()}.cpuprofile`), JSON.stringify(profile));
    })().catch((err: unknown) => process.stderr.write(`stove-bench-probe: CPU profile: ${String(err)}\n`));
  });
}
