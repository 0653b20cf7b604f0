/**
 * docs/architecture.md stays true where a test can tell: every file or directory path it names exists,
 * and its "Where to change X" table names every RPC of cri/rpc-table.ts with its adapter file.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = fileURLToPath(new URL('../../../../', import.meta.url));
const DOC = readFileSync(join(REPO, 'docs/architecture.md'), 'utf8');
const FILE = /\.(ts|c|sh|md|json|toml|js|mjs|cjs|proto|conflist|service)$/;

/**
 * The paths among the doc's code spans: a span with a slash that ends with a file extension or a slash
 * (`sandbox/run.ts`, `test/unit/cri/`, `streaming/`), without placeholders (`<module>`, `*`).
 */
export function namedPaths(markdown: string): string[] {
  const spans = new Set([...markdown.matchAll(/`([^`\n]+)`/g)].map((m) => m[1]!));
  return [...spans].filter((s) => s.includes('/') && /^[\w.\-/]+$/.test(s) && !s.startsWith('/') && (FILE.test(s) || s.endsWith('/')));
}

/** A path as the doc writes it: from the repository's root, or from `src/` (modules), or `docs/`. */
function exists(path: string): boolean {
  return ['', 'src', 'docs'].some((base) => existsSync(join(REPO, base, path)));
}

describe('docs/architecture.md', () => {
  it('finds paths in code spans and leaves other spans alone', () => {
    assert.deepEqual(namedPaths('`pod/lifecycle.ts` and `test/unit/<module>/`, `make lint`, `a/b` and `sandbox/`'), ['pod/lifecycle.ts', 'sandbox/']);
  });

  it('names only files and directories that exist', () => {
    const paths = namedPaths(DOC);
    assert.ok(paths.length > 100, `${paths.length} paths found`);
    assert.deepEqual(paths.filter((p) => !exists(p)), [], 'paths in docs/architecture.md that do not exist');
  });

  it("names every RPC of cri/rpc-table.ts in the RPC table, with its adapter file", () => {
    const table = readFileSync(join(REPO, 'src/cri/rpc-table.ts'), 'utf8');
    const adapters = [...table.matchAll(/import \{ (\w+) \} from '\.\/([\w-]+)\.js';/g)].map((m) => ({ rpc: m[1]![0]!.toUpperCase() + m[1]!.slice(1), file: m[2]! }));
    assert.ok(adapters.length >= 40, `${adapters.length} RPCs`);
    const rows = DOC.split('\n').filter((line) => line.startsWith('| ') && line.includes('`cri/'));
    const missing = adapters.filter(({ rpc, file }) => !rows.some((row) => new RegExp(`\\b${rpc}\\b`).test(row.split('|')[1]!) && row.includes(`\`cri/${file}.ts\``)));
    assert.deepEqual(missing, [], 'RPCs without their row');
  });
});
