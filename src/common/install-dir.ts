/**
 * Where Stove is installed: the directory of its package.json (the repository, or /opt/stove). Found by
 * walking up from this module, so the compiled tree (dist/src/…) and the daemon's bundle
 * (dist/bundle-<hash>/, see scripts/bundle.mjs) both find the helpers, the pause root filesystem and the
 * seccomp profile.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';

function packageDir(from: string): string {
  for (let dir = from; ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    if (dirname(dir) === dir) throw new Error(`no package.json above ${from}: Stove's install directory is unknown`);
  }
}

export const INSTALL_DIR = packageDir(import.meta.dirname);

/** A path inside the install directory. */
export function installPath(...parts: string[]): string {
  return join(INSTALL_DIR, ...parts);
}
