/**
 * `stove check`'s OCI runtime lines: runtime.runc and each runtime handler, with a warning for a crun
 * that chowns the node's /dev/null (crun 1.3 to 1.23; crun 1.24 skips devices, containers/crun#1847).
 */
import assert from 'node:assert/strict';
import { chmod, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { checkOciRuntimes, crunVersion, formatChecks, ociRuntimeCheck } from '../../../src/check/doctor.js';
import { defaultConfig } from '../../../src/config/schema.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

/** `crun --version` as Debian 12's crun prints it, with another version number. */
const crunOutput = (version: string) =>
  `crun version ${version}\ncommit: f8a096be060b22ccd3d5f3ebe44108517fbf6c30\nrundir: /run/crun\nspec: 1.0.0\n+SYSTEMD +SELINUX +APPARMOR +CAP +SECCOMP +EBPF +YAJL\n`;
const RUNC_OUTPUT = 'runc version 1.5.3\ncommit: v1.5.3\nspec: 1.3.0\ngo: go1.26.0\nlibseccomp: 2.5.4\n';

describe('stove check: OCI runtimes', () => {
  describe('crunVersion', () => {
    it('reads crun --version', () => {
      assert.deepEqual(crunVersion(crunOutput('1.8.1')), [1, 8, 1]);
      assert.deepEqual(crunVersion(crunOutput('1.24')), [1, 24, 0]);
      assert.deepEqual(crunVersion(crunOutput('1.23.1')), [1, 23, 1]);
      assert.deepEqual(crunVersion('crun version 1.25.1-dirty\n'), [1, 25, 1]);
    });

    it('is undefined for runc, an empty output or a version elsewhere than the first line', () => {
      assert.equal(crunVersion(RUNC_OUTPUT), undefined);
      assert.equal(crunVersion(''), undefined);
      assert.equal(crunVersion(`something else\n${crunOutput('1.8.1')}`), undefined);
    });
  });

  describe('ociRuntimeCheck', () => {
    for (const old of ['1.3', '1.8.1', '1.23', '1.23.1']) {
      it(`warns for crun ${old} (chowns the node's /dev/null)`, () => {
        const r = ociRuntimeCheck('runc', '/usr/bin/crun', crunOutput(old));
        assert.equal(r.status, 'warn');
        assert.match(r.detail, new RegExp(`^/usr/bin/crun: crun version ${old.replace(/\./g, '\\.')}: crun before 1\\.24 chowns the node's /dev/null`));
        assert.match(r.fix ?? '', /use runc, or crun 1\.24 or later/);
      });
    }

    for (const fixed of ['1.24', '1.24.1', '1.29.1', '2.0']) {
      it(`is ok for crun ${fixed}`, () => {
        const r = ociRuntimeCheck('handler crun', '/opt/crun', crunOutput(fixed));
        assert.deepEqual(r, { name: 'handler crun', status: 'ok', detail: `/opt/crun: crun version ${fixed}` });
      });
    }

    it('is ok for crun before 1.3 (it did not chown its streams) and for runc', () => {
      assert.equal(ociRuntimeCheck('runc', '/usr/bin/crun', crunOutput('1.2')).status, 'ok');
      assert.deepEqual(ociRuntimeCheck('runc', '/usr/bin/runc', RUNC_OUTPUT), { name: 'runc', status: 'ok', detail: '/usr/bin/runc: runc version 1.5.3' });
    });
  });

  describe('checkOciRuntimes', () => {
    const dir = tempDirPerTest('stove-oci-runtime-check-');

    async function fakeRuntime(name: string, output: string): Promise<string> {
      const path = join(dir(), name);
      await writeFile(path, `#!/bin/sh\n[ "$1" = --version ] || exit 2\nprintf '%s' '${output}'\n`);
      await chmod(path, 0o755);
      return path;
    }

    it('checks runtime.runc and every handler by running its --version', async () => {
      const config = defaultConfig();
      config.runtime.runc = await fakeRuntime('runc', RUNC_OUTPUT);
      const crun = await fakeRuntime('crun', crunOutput('1.8.1'));
      config.runtime.handlers = { crun: { path: crun, root: '/run/stove/runtime-crun', imageStore: '' } };
      const results = await checkOciRuntimes(config);
      assert.deepEqual(
        results.map((r) => [r.name, r.status]),
        [
          ['runc', 'ok'],
          ['handler crun', 'warn'],
        ],
      );
      assert.match(formatChecks(results), /warn  handler crun  .*crun version 1\.8\.1: crun before 1\.24 chowns the node's \/dev\/null[^\n]*\n +-> use runc, or crun 1\.24/);
    });

    it("fails for a missing runtime.runc, warns for a missing handler's binary", async () => {
      const config = defaultConfig();
      config.runtime.runc = join(dir(), 'no-runc');
      config.runtime.handlers = { kata: { path: join(dir(), 'no-kata'), root: '/run/stove/runtime-kata', imageStore: '' } };
      const [runc, kata] = await checkOciRuntimes(config);
      assert.equal(runc?.status, 'fail');
      assert.match(runc?.fix ?? '', /apt-get install runc/);
      assert.equal(kata?.status, 'warn');
      assert.match(kata?.fix ?? '', /runtime\.handlers\.kata\.path: pods with runtime_handler "kata" fail/);
    });
  });
});
