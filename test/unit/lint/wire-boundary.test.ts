/**
 * The wire boundary as `make lint` enforces it (docs/architecture.md, "The wire boundary"): snippets
 * linted with the repository's own eslint.config.js, so a config change that loses or narrows the rule
 * fails here. Only the import rules run (no type information needed).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ESLint } from 'eslint';
import { REPO_ROOT } from '../../helpers/stove-process.js';

describe('lint: the wire boundary', function () {
  this.timeout(60_000);
  let eslint: ESLint;
  before(() => {
    eslint = new ESLint({
      cwd: REPO_ROOT,
      cache: false,
      ruleFilter: ({ ruleId }) => ruleId === '@typescript-eslint/no-restricted-imports',
      overrideConfig: { languageOptions: { parserOptions: { projectService: false } } },
    });
  });

  /** The names lint refuses in `file` (a path under src/, which need not exist). */
  async function refused(file: string, code: string): Promise<string[]> {
    const [result] = await eslint.lintText(code, { filePath: join(REPO_ROOT, file) });
    return result!.messages.map((m) => /'(\w+)' import|(\*) import/.exec(m.message)?.slice(1).find(Boolean) ?? m.message);
  }

  const GEN = "'../gen/runtime/v1/api.js'";

  it('refuses requests, responses and results below cri/, and allows the config messages', async () => {
    const code = `import { ContainerConfig, ExecRequest, type ContainerStatus, ContainerEventType, type LinuxContainerResources } from ${GEN};\n`;
    for (const dir of ['container', 'sandbox', 'pod', 'streaming', 'oci', 'nri']) {
      assert.deepEqual(await refused(`src/${dir}/probe.ts`, code), ['ExecRequest', 'ContainerStatus', 'ContainerEventType'], dir);
    }
    assert.deepEqual(await refused('src/probe.ts', `import type { VersionResponse } from './gen/runtime/v1/api.js';\n`), ['VersionResponse']);
  });

  it('refuses a namespace import below cri/', async () => {
    assert.deepEqual(await refused('src/container/probe.ts', `import * as cri from ${GEN};\nexport const x = cri;\n`), ['*']);
  });

  it('lets the wire modules use every CRI type, and NRI its own protocol', async () => {
    const code = `import { ExecRequest, ContainerStatus } from ${GEN};\nexport const x = [ExecRequest, ContainerStatus];\n`;
    for (const dir of ['cri', 'api', 'cli']) assert.deepEqual(await refused(`src/${dir}/probe.ts`, code), [], dir);
    assert.deepEqual(await refused('src/nri/probe.ts', `import { CreateContainerRequest } from '../gen/nri/api.js';\nexport const x = CreateContainerRequest;\n`), []);
  });
});
