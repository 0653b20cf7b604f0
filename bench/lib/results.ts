/**
 * bench/RESULTS.md kept by the benchmarks themselves: with `STOVE_BENCH_RESULTS=bench/RESULTS.md`, a
 * benchmark that finishes puts the report it printed between its markers there,
 * `<!-- bench:<script> -->` and `<!-- /bench:<script> -->` (the script's name without `.ts`), replacing
 * the previous run's; a script without markers yet gets a section of its own at the end. The text
 * around the markers (what a run showed, what was done about it) stays as people wrote it.
 */
import { readFile, rename, writeFile } from 'node:fs/promises';

/** `text` with the part between `name`'s markers replaced by `report`, or a new section at the end. */
export function withResults(text: string, name: string, report: string): string {
  const open = `<!-- bench:${name} -->`;
  const close = `<!-- /bench:${name} -->`;
  const body = `${open}\n${report.trim()}\n${close}`;
  const start = text.indexOf(open);
  const end = text.indexOf(close);
  if (start >= 0 && end > start) return text.slice(0, start) + body + text.slice(end + close.length);
  if (start >= 0 || end >= 0) throw new Error(`the markers of ${name} are not a pair in order`);
  return `${text.trimEnd()}\n\n## \`bench/${name}.ts\`: the latest run\n\n${body}\n`;
}

/** Writes `report` into the results file (renamed into place whole). */
export async function recordResults(file: string, name: string, report: string): Promise<void> {
  const next = withResults(await readFile(file, 'utf8'), name, report);
  await writeFile(`${file}.tmp`, next);
  await rename(`${file}.tmp`, file);
}
