import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { INSTALL_DIR, installPath } from '../../../src/common/install-dir.js';
import { DEFAULT_MOUNT_HELPER } from '../../../src/platform/mount-helper.js';
import { BUILTIN_SECCOMP_PROFILE } from '../../../src/oci/host-security.js';

describe('install dir', () => {
  it("is the directory of Stove's package.json, above the compiled module", () => {
    const pkg = JSON.parse(readFileSync(installPath('package.json'), 'utf8')) as { name: string };
    assert.equal(pkg.name, 'stove');
    assert.ok(import.meta.dirname.startsWith(`${INSTALL_DIR}/dist/`));
  });

  it('places the helpers in dist/libexec and finds the seccomp profile in the sources', () => {
    assert.equal(DEFAULT_MOUNT_HELPER, `${INSTALL_DIR}/dist/libexec/stove-mount-helper`);
    assert.doesNotThrow(() => readFileSync(BUILTIN_SECCOMP_PROFILE, 'utf8'));
  });
});
