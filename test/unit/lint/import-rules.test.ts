/** The import-rule check (test/lint/import-rules.ts) fails on what it is for and passes src/ as it is. */
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { cycles, importsOf, readImports, violations, type Import } from '../../lint/import-rules.js';

const value = (from: string, to: string): Import => ({ from, to, typeOnly: false });
const type = (from: string, to: string): Import => ({ from, to, typeOnly: true });

describe('import rules', () => {
  it('reads value, type-only, re-exported and dynamic imports, and leaves packages alone', () => {
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
    ].join('\n');
    assert.deepEqual(importsOf('m/x.ts', text), [
      value('m/x.ts', 'm/a.ts'),
      type('m/x.ts', 'b/b.ts'),
      type('m/x.ts', 'm/c.ts'),
      value('m/x.ts', 'm/e.ts'),
      value('m/x.ts', 'm/side-effect.ts'),
      value('m/x.ts', 'm/g.ts'),
      type('m/x.ts', 'm/h.ts'),
      value('m/x.ts', 'lazy/x.ts'),
    ]);
  });

  it('finds every cycle, of two nodes, of many, and a node importing itself', () => {
    const found = cycles([['a', 'b'], ['b', 'a'], ['c', 'd'], ['d', 'e'], ['e', 'c'], ['e', 'f'], ['g', 'g'], ['h', 'a']]);
    assert.deepEqual(found.map((c) => c.join(' ')).sort(), ['a b', 'c d e', 'g']);
    assert.deepEqual(cycles([['a', 'b'], ['b', 'c'], ['a', 'c']]), []);
  });

  it('fails a cycle between modules even through a type-only import', () => {
    assert.deepEqual(violations([value('oci/a.ts', 'platform/b.ts'), type('platform/c.ts', 'oci/types.ts')]), ['import cycle between modules: oci, platform']);
  });

  it('fails a cycle between files of a module only when code runs at load', () => {
    assert.deepEqual(violations([value('sandbox/service.ts', 'sandbox/run.ts'), type('sandbox/run.ts', 'sandbox/service.ts')]), []);
    assert.deepEqual(violations([value('sandbox/service.ts', 'sandbox/run.ts'), value('sandbox/run.ts', 'sandbox/service.ts')]), [
      'import cycle between files: sandbox/run.ts, sandbox/service.ts',
    ]);
  });

  it('fails imports against the direction of the layers', () => {
    const broken = [
      type('container/service.ts', 'cri/sandbox-query.ts'),
      value('oci/spec.ts', 'api/errors.ts'),
      value('container/create.ts', 'pod/lifecycle.ts'),
      value('nri/lifecycle.ts', 'streaming/server.ts'),
      type('sandbox/service.ts', 'container/model.ts'),
      type('container/service.ts', 'sandbox/service.ts'),
      value('cri/x.ts', 'daemon.ts'),
    ];
    for (const i of broken) {
      const found = violations([i]);
      assert.equal(found.length, 1, found.join('\n'));
      assert.ok(found[0]!.startsWith(`${i.from} imports ${i.to}: `), found[0]);
    }
    const allowed = [
      value('daemon.ts', 'cri/sandbox-run.ts'),
      value('cri/sandbox-run.ts', 'pod/lifecycle.ts'),
      value('cri/errors.ts', 'api/errors.ts'),
      value('pod/lifecycle.ts', 'sandbox/service.ts'),
      type('container/deps.ts', 'sandbox/model.ts'),
      value('container/stats.ts', 'sandbox/resize.ts'),
      value('main.ts', 'daemon.ts'),
    ];
    assert.deepEqual(violations(allowed), []);
  });

  it('passes src/ as it is', () => {
    const imports = readImports(fileURLToPath(new URL('../../../../src', import.meta.url)));
    assert.ok(imports.length > 500, `read ${imports.length} imports`);
    assert.deepEqual(violations(imports), []);
  });
});
