/**
 * `make test-one FILE=test/unit/…/x.test.ts [ARGS='-g pattern']`: runs one test file seconds after an
 * edit, without lint or type checking. Every .ts file under src/, test/ and bench/ newer than its
 * dist/ output is transpiled alone by esbuild (types stripped, no checks) into the place tsc writes it,
 * with its source map. When a file under src/ changed, a daemon bundle exists and the test is not a unit
 * test, the bundle is made again (scripts/bundle.mjs, several seconds), since the tests that start
 * `stove serve` run it; unit tests import dist/src directly. Then mocha runs the file.
 *
 * `make build` remains the check: tsc compiles everything again with its strict checks (it re-emits
 * the files whose sources changed since its last run, so nothing of this script's output outlives it),
 * and `make lint` runs the linters.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, join, relative } from 'node:path';
import { transform } from 'esbuild';

const ROOTS = ['src', 'test', 'bench'];
const DIST = 'dist';

async function* tsFiles(dir) {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* tsFiles(path);
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) yield path;
  }
}

async function mtime(path) {
  try {
    return (await stat(path)).mtimeMs;
  } catch {
    return -1;
  }
}

/** Transpiles the stale files; returns those it wrote. */
async function transpileStale() {
  const stale = [];
  for (const root of ROOTS) {
    for await (const source of tsFiles(root)) {
      const out = join(DIST, source.replace(/\.ts$/, '.js'));
      if ((await mtime(out)) < (await mtime(source))) stale.push([source, out]);
    }
  }
  await Promise.all(
    stale.map(async ([source, out]) => {
      const result = await transform(await readFile(source, 'utf8'), {
        loader: 'ts',
        format: 'esm',
        platform: 'node',
        target: 'es2023',
        sourcemap: 'external',
        sourcefile: relative(dirname(out), source),
        tsconfigRaw: { compilerOptions: { useDefineForClassFields: true } },
      });
      await mkdir(dirname(out), { recursive: true });
      await writeFile(`${out}.map`, result.map);
      await writeFile(out, `${result.code}//# sourceMappingURL=${basename(out)}.map\n`);
    }),
  );
  return stale.map(([source]) => source);
}

const [file, ...mochaArgs] = process.argv.slice(2);
if (!file) {
  console.error('usage: make test-one FILE=test/unit/<module>/<name>.test.ts [ARGS="-g pattern"]');
  process.exit(2);
}
const target = file.startsWith(`${DIST}/`) ? file : join(DIST, file.replace(/\.ts$/, '.js'));
const started = performance.now();
const written = await transpileStale();
const unit = target.startsWith(join(DIST, 'test/unit/'));
if (!unit && written.some((path) => path.startsWith('src/')) && existsSync(join(DIST, 'bundle'))) {
  const bundled = spawnSync(process.execPath, ['scripts/bundle.mjs'], { stdio: 'inherit' });
  if (bundled.status !== 0) process.exit(bundled.status ?? 1);
}
console.log(`test-one: ${written.length} file(s) transpiled in ${Math.round(performance.now() - started)} ms`);
if (!existsSync(target)) {
  console.error(`test-one: ${target} does not exist (is ${file} a test file under test/?)`);
  process.exit(2);
}
const mocha = spawnSync(process.execPath, ['--enable-source-maps', 'node_modules/mocha/bin/mocha.js', target, ...mochaArgs], {
  stdio: 'inherit',
});
process.exit(mocha.status ?? 1);
