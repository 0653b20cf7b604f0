/** Temporary directories for tests, removed after each test whether it passed or failed. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A fresh directory under the system's temp dir for each test of the suite it is called in (in a
 * `describe` body); the returned function gives the current test's directory.
 */
export function tempDirPerTest(prefix: string): () => string {
  let dir: string | undefined;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), prefix));
  });
  afterEach(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });
  return () => {
    if (!dir) throw new Error('tempDirPerTest: no test is running');
    return dir;
  };
}
