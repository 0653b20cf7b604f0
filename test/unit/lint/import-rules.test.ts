/** The import-rule check (test/lint/import-rules.ts) fails on what it is for and passes src/ as it is. */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { cycles, importsOf, layersOf, layoutViolations, moduleOf, readImports, violations as violationsIn, type Import } from '../../lint/import-rules.js';

const imp = (from: string, to: string): Import => ({ from, to });
const LAYERS = layersOf(readFileSync(fileURLToPath(new URL('../../../../docs/architecture.md', import.meta.url)), 'utf8'));
/** Against the layers of docs/architecture.md as they are. */
const violations = (imports: Import[]) => violationsIn(imports, LAYERS);

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
    assert.deepEqual(violationsIn([imp('oci/a.ts', 'platform/b.ts'), imp('platform/c.ts', 'oci/b.ts')], []), ['import cycle between modules: oci, platform']);
  });

  it('fails a cycle between files of a module', () => {
    assert.deepEqual(violations([imp('sandbox/service.ts', 'sandbox/run.ts'), imp('sandbox/run.ts', 'sandbox/deps.ts')]), []);
    assert.deepEqual(violations([imp('sandbox/service.ts', 'sandbox/run.ts'), imp('sandbox/run.ts', 'sandbox/service.ts')]), [
      'import cycle between files: sandbox/run.ts, sandbox/service.ts',
    ]);
  });

  it('fails imports against the direction of the layers', () => {
    const broken = [
      imp('container/service.ts', 'cri/list-pod-sandbox.ts'),
      imp('oci/spec.ts', 'api/errors.ts'),
      imp('container/create.ts', 'pod/lifecycle.ts'),
      imp('nri/lifecycle.ts', 'streaming/server.ts'),
      imp('sandbox/service.ts', 'container/model.ts'),
      imp('container/service.ts', 'sandbox/service.ts'),
      imp('cri/x.ts', 'daemon.ts'),
      // Below the rules of who may import whom, the rows: up, and within a row.
      imp('platform/cgroups.ts', 'config/schema.ts'),
      imp('network/pod-network.ts', 'monitor/conmon.ts'),
      imp('images/pull.ts', 'sandbox/model.ts'),
      imp('common/errors.ts', 'platform/proc.ts'),
      // A module with an index.ts, entered past it.
      imp('cdi/edits.ts', 'oci/types.ts'),
    ];
    // oci/ has an index.ts: the check learns it from the imports.
    const ociIndex = imp('oci/index.ts', 'oci/types.ts');
    for (const i of broken) {
      const found = violations([i, ociIndex]);
      assert.ok(found.length >= 1, `${i.from} → ${i.to} passes`);
      for (const line of found) assert.ok(line.startsWith(`${i.from} imports ${i.to}: `), line);
    }
    const allowed = [
      imp('daemon.ts', 'cri/rpc-table.ts'),
      imp('cri/run-pod-sandbox.ts', 'pod/lifecycle.ts'),
      imp('cri/errors.ts', 'api/errors.ts'),
      imp('pod/lifecycle.ts', 'sandbox/service.ts'),
      imp('container/deps.ts', 'sandbox/model.ts'),
      imp('container/resources.ts', 'sandbox/resize.ts'),
      imp('main.ts', 'daemon.ts'),
      imp('cdi/edits.ts', 'oci/index.ts'),
      imp('stats/stats.ts', 'container/model.ts'),
    ];
    assert.deepEqual(violations(allowed), []);
    assert.deepEqual(violations([imp('network/pod-network.ts', 'monitor/conmon.ts'), imp('platform/cgroups.ts', 'config/schema.ts')]), [
      'network/pod-network.ts imports monitor/conmon.ts: monitor/ is in the same row as network/ in the layers of docs/architecture.md (imports point to the rows below)',
      'platform/cgroups.ts imports config/schema.ts: config/ is in a row above platform/ in the layers of docs/architecture.md (imports point to the rows below)',
    ]);
    assert.deepEqual(violations([imp('cdi/edits.ts', 'oci/types.ts'), ociIndex]), ['cdi/edits.ts imports oci/types.ts: oci/ is entered through oci/index.ts alone']);
  });

  it('reads the layers from the diagram of docs/architecture.md: the module names each row starts with', () => {
    const markdown = [
      '# Architecture',
      '## Layers',
      'Text with `cri/` in it.',
      '```',
      ' main.ts          the command',
      '    │             cri/ in a continuation line is no row',
      ' daemon.ts  cli/  what main.ts runs',
      '    │',
      ' oci/  storage/   spec building; layers',
      '```',
      '## Import rules',
      '```',
      ' other/ not the diagram',
      '```',
    ].join('\n');
    assert.deepEqual(layersOf(markdown), [['main'], ['daemon', 'cli'], ['oci', 'storage']]);
    assert.throws(() => layersOf('# Architecture\n'), /no diagram under "## Layers"/);
    assert.deepEqual(LAYERS[0], ['main']);
    assert.deepEqual(LAYERS.at(-1), ['gen']);
  });

  it('fails a module the diagram does not place, and a name in it that is no module', () => {
    assert.deepEqual(layoutViolations([['main'], ['daemon', 'gone'], ['main']], ['main', 'daemon', 'new']), [
      'module new is in no row of the layers in docs/architecture.md',
      'the layers in docs/architecture.md name main more than once',
      'the layers in docs/architecture.md name gone, which is no module of src/',
    ]);
  });

  it('passes src/ as it is, every module placed in the diagram', () => {
    const imports = readImports(fileURLToPath(new URL('../../../../src', import.meta.url)));
    assert.ok(imports.length > 500, `read ${imports.length} imports`);
    assert.deepEqual(violations(imports), []);
    assert.deepEqual(layoutViolations(LAYERS, new Set(imports.flatMap((i) => [moduleOf(i.from), moduleOf(i.to)]))), []);
    assert.ok(LAYERS.flat().length >= 25, LAYERS.join(' | '));
  });
});
