/** The import-rule check (test/lint/import-rules.ts) fails on what it is for and passes src/ as it is. */
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { cycles, importsOf, readImports, violations, type Import } from '../../lint/import-rules.js';

const imp = (from: string, to: string): Import => ({ from, to });

describe('import rules', () => {
  it('reads imports, type-only ones, re-exports, dynamic imports and import types, and leaves packages alone', () => {
    const text = [
      "import { a } from './a.js';",
      "import type { B } from '../b/b.js';",
      "import { type C, type D } from './c.js';",
      "import { type E, f } from './e.js';",
      "import './side-effect.js';",
      "export { g } from './g.js';",
      "export type { H } from './h.js';",
      "import ts from 'typescript';",
      "const lazy = () => import('../lazy/x.js');",
      "type Lazy = typeof import('../lazy/y.js');",
    ].join('\n');
    assert.deepEqual(importsOf('m/x.ts', text), [
      imp('m/x.ts', 'm/a.ts'),
      imp('m/x.ts', 'b/b.ts'),
      imp('m/x.ts', 'm/c.ts'),
      imp('m/x.ts', 'm/e.ts'),
      imp('m/x.ts', 'm/side-effect.ts'),
      imp('m/x.ts', 'm/g.ts'),
      imp('m/x.ts', 'm/h.ts'),
      imp('m/x.ts', 'lazy/x.ts'),
      imp('m/x.ts', 'lazy/y.ts'),
    ]);
  });

  it('finds every cycle, of two nodes, of many, and a node importing itself', () => {
    const found = cycles([['a', 'b'], ['b', 'a'], ['c', 'd'], ['d', 'e'], ['e', 'c'], ['e', 'f'], ['g', 'g'], ['h', 'a']]);
    assert.deepEqual(found.map((c) => c.join(' ')).sort(), ['a b', 'c d e', 'g']);
    assert.deepEqual(cycles([['a', 'b'], ['b', 'c'], ['a', 'c']]), []);
  });

  it('fails a cycle between modules', () => {
    assert.deepEqual(violations([imp('oci/a.ts', 'platform/b.ts'), imp('platform/c.ts', 'oci/types.ts')]), ['import cycle between modules: oci, platform']);
  });

  it('fails a cycle between files of a module', () => {
    assert.deepEqual(violations([imp('sandbox/service.ts', 'sandbox/run.ts'), imp('sandbox/run.ts', 'sandbox/deps.ts')]), []);
    assert.deepEqual(violations([imp('sandbox/service.ts', 'sandbox/run.ts'), imp('sandbox/run.ts', 'sandbox/service.ts')]), [
      'import cycle between files: sandbox/run.ts, sandbox/service.ts',
    ]);
  });

  it('fails imports against the direction of the layers', () => {
    const broken = [
      imp('container/service.ts', 'cri/sandbox-query.ts'),
      imp('oci/spec.ts', 'api/errors.ts'),
      imp('container/create.ts', 'pod/lifecycle.ts'),
      imp('nri/lifecycle.ts', 'streaming/server.ts'),
      imp('sandbox/service.ts', 'container/model.ts'),
      imp('container/service.ts', 'sandbox/service.ts'),
      imp('cri/x.ts', 'daemon.ts'),
    ];
    for (const i of broken) {
      const found = violations([i]);
      assert.equal(found.length, 1, found.join('\n'));
      assert.ok(found[0]!.startsWith(`${i.from} imports ${i.to}: `), found[0]);
    }
    const allowed = [
      imp('daemon.ts', 'cri/sandbox-run.ts'),
      imp('cri/sandbox-run.ts', 'pod/lifecycle.ts'),
      imp('cri/errors.ts', 'api/errors.ts'),
      imp('pod/lifecycle.ts', 'sandbox/service.ts'),
      imp('container/deps.ts', 'sandbox/model.ts'),
      imp('container/stats.ts', 'sandbox/resize.ts'),
      imp('main.ts', 'daemon.ts'),
    ];
    assert.deepEqual(violations(allowed), []);
  });

  it('passes src/ as it is', () => {
    const imports = readImports(fileURLToPath(new URL('../../../../src', import.meta.url)));
    assert.ok(imports.length > 500, `read ${imports.length} imports`);
    assert.deepEqual(violations(imports), []);
  });
});
