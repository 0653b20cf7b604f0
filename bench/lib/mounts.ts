/** Unmounts whatever a benchmark run left mounted under a directory. */
import { mountPoints, unmount } from '../../src/platform/mount.js';

export async function unmountUnder(dir: string): Promise<void> {
  const points = [...(await mountPoints())].filter((p) => p.startsWith(dir + '/')).sort((a, b) => b.length - a.length);
  for (const p of points) await unmount(p, true).catch(() => {});
}
