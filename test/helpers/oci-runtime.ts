/**
 * The OCI runtime the integration and security suites run containers with. `STOVE_TEST_RUNTIME` names
 * its binary (runc 1.5 of test/e2e/runc/build.sh, Debian's crun, …); without it, Debian's runc 1.1.5 at
 * /usr/bin/runc, the daemon's default. A daemon the helpers start gets it as `runtime.runc` through a
 * drop-in of its own config dir, so a test's own config file stays as it is; the in-process fixtures
 * and the safety nets that list and delete leftover containers use the same binary (each runtime reads
 * only its own state format).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { writeFile } from 'node:fs/promises';
import { execa } from 'execa';

/** Debian's runc, the daemon's default `runtime.runc`. */
export const DEFAULT_RUNTIME = '/usr/bin/runc';

/** The runtime binary under test (absolute path). */
export const TEST_RUNTIME = process.env['STOVE_TEST_RUNTIME'] || DEFAULT_RUNTIME;

/** True when the suite runs with another runtime than the daemon's default. */
export const runtimeChosen = (): boolean => TEST_RUNTIME !== DEFAULT_RUNTIME;

/** The drop-in a test daemon's config dir gets when another runtime is chosen (a name sorting first). */
export async function writeRuntimeDropIn(configDir: string): Promise<void> {
  if (!runtimeChosen()) return;
  await writeFile(join(configDir, '00-oci-runtime.toml'), `# STOVE_TEST_RUNTIME\n[runtime]\nrunc = ${JSON.stringify(TEST_RUNTIME)}\n`);
}

/** The part of `<runtime> features` the tests look at. */
export interface RuntimeFeatures {
  linux?: { mountExtensions?: { idmap?: { enabled?: boolean } }; netDevices?: { enabled?: boolean } };
}

/** `<runtime> features` of the runtime under test as JSON; undefined when it has no such command (crun < 1.9). */
export async function testRuntimeFeatures(): Promise<RuntimeFeatures | undefined> {
  const r = await execa(TEST_RUNTIME, ['features'], { reject: false });
  return r.exitCode === 0 ? (JSON.parse(r.stdout) as RuntimeFeatures) : undefined;
}

/**
 * runc 1.5 as test/e2e/runc/build.sh builds it (the version test/e2e/runc/go.mod pins, in
 * `$STOVE_E2E_CACHE/runc/<version>/runc`), or `STOVE_RUNC15`; undefined when it is not built.
 */
export function runc15Path(): string | undefined {
  if (process.env['STOVE_RUNC15']) return process.env['STOVE_RUNC15'];
  const goMod = readFileSync(resolve(import.meta.dirname, '../../../test/e2e/runc/go.mod'), 'utf8');
  const version = /^\s*github\.com\/opencontainers\/runc (v\S+)/m.exec(goMod)?.[1];
  const path = version && join(process.env['STOVE_E2E_CACHE'] || '/var/cache/stove-e2e', 'runc', version, 'runc');
  return path && existsSync(path) ? path : undefined;
}
