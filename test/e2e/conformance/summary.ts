/**
 * The summary of a ginkgo v2 JSON report (conformance.sh writes it to summary.txt): specs passed,
 * failed, skipped (and pending or cut short), minutes, then every failure's full name and the first line
 * of its message, and every spec that passed only on a later attempt (E2E_FLAKE_ATTEMPTS), with the
 * first line of its first failure. With --names-only, just the failed specs' full names, one a line.
 *
 *   node summary.js <report.json> [--names-only]
 */
import { readFileSync } from 'node:fs';

interface SpecReport {
  ContainerHierarchyTexts?: string[] | null;
  LeafNodeType: string;
  LeafNodeText: string;
  State: string;
  RunTime: number;
  NumAttempts?: number;
  Failure?: { Message?: string; FailureNodeType?: string; Location?: { FileName?: string; LineNumber?: number } };
  AdditionalFailures?: { Failure?: { Message?: string } }[] | null;
}
interface SuiteReport {
  SuiteDescription: string;
  RunTime: number;
  SpecReports: SpecReport[] | null;
}

const [path, flag] = process.argv.slice(2);
if (!path) {
  console.error('usage: summary.js <report.json> [--names-only]');
  process.exit(2);
}
const suites = JSON.parse(readFileSync(path, 'utf8')) as SuiteReport[];
const name = (s: SpecReport) => [...(s.ContainerHierarchyTexts ?? []), s.LeafNodeText].filter(Boolean).join(' ');
const counts = new Map<string, number>();
const failures: SpecReport[] = [];
const flaky: SpecReport[] = [];
let ns = 0;
for (const suite of suites) {
  ns += suite.RunTime;
  for (const spec of suite.SpecReports ?? []) {
    // Suite-level nodes (BeforeSuite and the like) count only when they fail.
    if (spec.LeafNodeType !== 'It') {
      if (spec.State !== 'passed' && spec.State !== 'skipped') failures.push(spec);
      continue;
    }
    counts.set(spec.State, (counts.get(spec.State) ?? 0) + 1);
    if (!['passed', 'skipped', 'pending'].includes(spec.State)) failures.push(spec);
    else if (spec.State === 'passed' && (spec.NumAttempts ?? 1) > 1) flaky.push(spec);
  }
}
if (flag === '--names-only') {
  for (const f of failures) console.log(name(f) || f.LeafNodeType);
  process.exit(0);
}
const n = (state: string) => counts.get(state) ?? 0;
const cut = [...counts].filter(([s]) => !['passed', 'failed', 'skipped', 'pending'].includes(s));
const ran = n('passed') + n('failed') + cut.reduce((a, [, c]) => a + c, 0);
console.log(
  `ran ${ran}: passed ${n('passed')}, failed ${n('failed')}${cut.map(([s, c]) => `, ${s} ${c}`).join('')}; skipped ${n('skipped')}` +
    `${n('pending') ? `, pending ${n('pending')}` : ''}${flaky.length ? `; passed only on a later attempt ${flaky.length}` : ''}; ${(ns / 6e10).toFixed(1)} min`,
);
for (const f of failures) {
  const first = (f.Failure?.Message ?? '').split('\n').find((l) => l.trim()) ?? '';
  const at = f.Failure?.Location?.FileName ? ` (${f.Failure.Location.FileName.replace(/^.*\/k8s\.io\//, '')}:${f.Failure.Location.LineNumber})` : '';
  console.log(`- [${f.State}] ${name(f) || f.LeafNodeType}${at}\n    ${first.trim().slice(0, 400)}`);
}
for (const f of flaky) {
  const first = (f.Failure?.Message ?? f.AdditionalFailures?.[0]?.Failure?.Message ?? '').split('\n').find((l) => l.trim()) ?? '';
  console.log(`- [flaky: passed on attempt ${f.NumAttempts}] ${name(f)}${first ? `\n    ${first.trim().slice(0, 400)}` : ''}`);
}
