/**
 * A container's writable layer as a checkpoint archive holds it: the overlay upper dir is exactly what
 * the container changed. Entries there are added or changed files (`rootfs-diff.tar`); a whiteout (a
 * char device 0:0) is a deleted file (`deleted.files`); an opaque directory (trusted.overlay.opaque=y)
 * hides everything the image had there, so it is both deleted and written again (a restore deletes
 * first, then unpacks). Mount points (the spec's destinations and the runtime's own) are left out, as
 * CRI-O does: what is mounted there is not the layer's.
 */
import { lstat, opendir } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';

interface Xattr {
  getAttributeSync(path: string, name: string): Buffer | null;
}
let loadedXattr: Xattr | undefined;
const xattr = (): Xattr => (loadedXattr ??= createRequire(import.meta.url)('@napi-rs/xattr') as Xattr);

/** Mount points every container has (CRI-O's list, libpod/diff.go). */
const RUNTIME_MOUNTS = ['dev', 'dev/shm', 'proc', 'run', 'run/.containerenv', 'run/secrets', 'sys'];

export interface LayerChanges {
  /** Relative paths to archive, each parent before its children. */
  changed: string[];
  /** Deleted paths, absolute in the container (`/tmp/x`), as deleted.files lists them. */
  deleted: string[];
}

function isOpaque(path: string): boolean {
  try {
    return xattr().getAttributeSync(path, 'trusted.overlay.opaque')?.toString() === 'y';
  } catch {
    return false;
  }
}

/** The changes in `upperDir`, without `mountPoints` (container paths) and what is below them. */
export async function writableLayerChanges(upperDir: string, mountPoints: readonly string[]): Promise<LayerChanges> {
  const skipped = new Set([...RUNTIME_MOUNTS, ...mountPoints.map((m) => m.split('/').filter(Boolean).join('/'))]);
  const changes: LayerChanges = { changed: [], deleted: [] };
  const walk = async (rel: string): Promise<void> => {
    const dir = await opendir(rel ? join(upperDir, rel) : upperDir);
    for await (const entry of dir) {
      const child = rel ? `${rel}/${entry.name}` : entry.name;
      if (skipped.has(child)) continue;
      const path = join(upperDir, child);
      const st = await lstat(path);
      if (st.isCharacterDevice() && st.rdev === 0) {
        changes.deleted.push(`/${child}`);
        continue;
      }
      if (st.isDirectory() && isOpaque(path)) changes.deleted.push(`/${child}`);
      changes.changed.push(child);
      if (st.isDirectory()) await walk(child);
    }
  };
  await walk('');
  return changes;
}
