/** What every benchmark script does around its measurements: options, the report heading, the exit. */
import { cpus } from 'node:os';
import { basename } from 'node:path';
import { recordResults } from './results.js';
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util';
import { containerdVersion } from './containerd.js';

type Values<O extends ParseArgsOptionsConfig> = ReturnType<typeof parseArgs<{ options: O & { help: { type: 'boolean' } } }>>['values'];

/** Parses the options; `--help` prints `usage` and exits, a bad option prints it and exits with 2. */
export function benchOptions<O extends ParseArgsOptionsConfig>(usage: string, options: O): Values<O> {
  let values: Values<O>;
  try {
    values = parseArgs({ options: { ...options, help: { type: 'boolean' } } }).values as Values<O>;
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\nusage: ${usage}\n`);
    process.exit(2);
  }
  if ((values as { help?: boolean }).help) {
    process.stdout.write(`usage: ${usage}\n`);
    process.exit(0);
  }
  return values;
}

/**
 * `\n<title> (<date>; <cores> × <cpu>; <containerd version>; <details>)\n\n`, above a report's first table;
 * the version is Debian's containerd's unless the bench ran another.
 */
export function heading(title: string, details: string, containerd = containerdVersion()): string {
  return `\n${title} (${new Date().toISOString().slice(0, 10)}; ${cpus().length} × ${cpus()[0]?.model.trim()}; ${containerd}; ${details})\n\n`;
}

/**
 * Runs a benchmark's main; a failure prints its stack and exits with 1. With `cleanup` (what main's
 * `finally` runs), SIGINT or SIGTERM runs it and exits with 130: a bench stopped midway must not leave
 * pods, mounts, bridges or iptables rules behind. With `STOVE_BENCH_RESULTS` set to bench/RESULTS.md,
 * what main printed goes there too once it succeeded (results.ts).
 */
export function runBench(main: () => Promise<void>, cleanup?: () => Promise<void>): void {
  if (cleanup) {
    let stopping = false;
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      process.on(signal, () => {
        if (stopping) return;
        stopping = true;
        process.stderr.write(`bench: ${signal}: cleaning up\n`);
        cleanup()
          .catch((err: unknown) => process.stderr.write(`bench: cleanup failed: ${(err as Error).message}\n`))
          .finally(() => process.exit(130));
      });
    }
  }
  const resultsFile = process.env.STOVE_BENCH_RESULTS;
  let printed = '';
  if (resultsFile) {
    const write = process.stdout.write.bind(process.stdout);
    process.stdout.write = ((chunk: string | Uint8Array, ...rest: never[]) => {
      printed += typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
      return write(chunk, ...rest);
    }) as typeof process.stdout.write;
  }
  const name = basename(process.argv[1] ?? 'bench', '.js');
  const run = async () => {
    await main();
    if (resultsFile) {
      await recordResults(resultsFile, name, printed);
      process.stderr.write(`bench: the report is in ${resultsFile} (between <!-- bench:${name} --> markers)\n`);
    }
  };
  run().catch((err: unknown) => {
    process.stderr.write(`bench: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
}
