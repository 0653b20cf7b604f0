/**
 * CRIU on the guest's node: checkpoint and restore of containers will be tested there (the hosts'
 * kernel fails `criu check`), so the guest's kernel must have what CRIU needs. Runs only in the guest.
 */
import assert from 'node:assert/strict';
import { execa } from 'execa';

describe('CRIU on the guest node', function () {
  this.timeout(120_000);

  before(function () {
    if (process.env.STOVE_VM !== '1') {
      console.log('    skipping the CRIU check: it runs in the guest test/vm/run.sh boots');
      this.skip();
    }
  });

  it('passes `criu check`', async () => {
    const r = await execa('criu', ['check'], { reject: false, all: true });
    assert.equal(r.exitCode, 0, `criu check failed:\n${r.all}`);
    assert.match(r.all, /Looks good/);
    // What `--all` adds (features beyond what checkpoint/restore needs): recorded, not required.
    const all = await execa('criu', ['check', '--all'], { reject: false, all: true });
    console.log(`    criu ${(await execa('criu', ['--version'], { reject: false })).stdout.split('\n')[0]}; check --all: exit ${all.exitCode}${all.exitCode ? `\n${all.all.split('\n').map((l) => `      ${l}`).join('\n')}` : ''}`);
  });
});
