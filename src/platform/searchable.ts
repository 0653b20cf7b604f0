/**
 * A pod with its own user namespace runs as an unprivileged host uid (its mapped root): the OCI runtime
 * sets its root filesystem up as that uid, so every directory above it must let other users through.
 * Stove makes the parents of its pod dirs 0711 (persist/tree-modes.ts); this names a parent that does
 * not, instead of leaving the runtime to fail with a bare EACCES.
 */
import { stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { failedPrecondition } from '../common/errors.js';

/** Throws FAILED_PRECONDITION naming the first directory above `path` that others may not search. */
export async function assertSearchableByOthers(path: string, what: string): Promise<void> {
  for (let dir = dirname(path); ; dir = dirname(dir)) {
    const { mode } = await stat(dir);
    if (!(mode & 0o001)) {
      throw failedPrecondition(
        `${what}: "${dir}" (mode ${(mode & 0o777).toString(8).padStart(4, '0')}) does not let other users through; make it 0711 or 0755`,
      );
    }
    if (dir === '/') return;
  }
}
