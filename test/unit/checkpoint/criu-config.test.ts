import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { StoveError } from '../../../src/common/errors.js';
import { writeRestoreCriuConfig } from '../../../src/checkpoint/restore.js';

describe('checkpoint: CRIU config of a restore', () => {
  let dir: string;
  beforeEach(async () => (dir = await mkdtemp(join(tmpdir(), 'stove-criu-conf-'))));
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it('tells CRIU to leave cgroups alone, in a file for root alone', async () => {
    const path = await writeRestoreCriuConfig(dir);
    assert.equal(await readFile(path, 'utf8'), 'manage-cgroups=ignore\n');
    assert.equal((await stat(path)).mode & 0o777, 0o600);
  });

  it('never writes over an entry the archive brought under its name', async () => {
    await mkdir(join(dir, 'criu-restore.conf'));
    await assert.rejects(writeRestoreCriuConfig(dir), (err: unknown) => err instanceof StoveError && err.kind === 'FailedPrecondition' && /holds criu-restore\.conf/.test(err.message));
  });
});
