/**
 * Who may enter Stove's trees. Unprivileged host users must not list, read or execute anything that
 * belongs to a container or an image (records hold the containers' environments; a root container's
 * writable layer may hold a set-user-ID-root program; moby CVE-2021-41091). The layout:
 *
 *   <root>                     0700  nothing below is for anyone but root:
 *     containers/ sandboxes/   0700  records 0600; containers/<id>/fs/{upper,work} (upper keeps 0755:
 *                                    it is the mode of the container's `/`)
 *     images/                  0700  blobs, layers, records 0600, holds 0600
 *     cni/                     0700
 *   <images.writable_layers_dir>  0700  when set, the writable layers instead of containers/<id>/fs
 *                                    (<id>/{upper,work}); made and closed by images/image-service.ts
 *   <state>                    0711  search only: a pod with its own user namespace needs a path through
 *     pause-rootfs/            0755  Stove's pause program, no container data
 *     containers/ sandboxes/   0711  search only, never listable
 *       <id>/                  0700 root:root, or 0710 root:<G> for a pod with its own user namespace
 *     exits/ attach/ exec/ netns/ pulls/ runc/   0700
 *
 * The root of a user-namespaced pod is an unprivileged host uid U with host gid G (the ids its mappings
 * give in-namespace 0). The OCI runtime sets the pod's containers up as U:G, so it needs search
 * permission on the path to each bundle's `rootfs` mount point, to the pod's bind-mount sources
 * (hostname, resolv.conf, hosts, shm) and to the pause root filesystem. It gets exactly that: the
 * parents are 0711 (search, no listing), and the pod's own dirs are group G with 0710, so U:G may pass
 * through them and nobody else may (no host account has a gid in a pod's range). Overlay layers and
 * upper dirs are reached by overlayfs with the mounter's (root's) credentials, so <root> stays 0700.
 *
 * A Stove before this layout made these trees 0755/0711 and records 0644: `tightenStateTrees` brings
 * what it finds at start-up to the modes above; `tightenPodDirs` does the per-pod dirs once the records
 * say which pods have their own user namespace.
 */
import type { Stats } from 'node:fs';
import { chmod, chown, lstat, mkdir, readdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';

/** Directory modes of the layout above. */
export const PRIVATE_DIR = 0o700;
export const RECORD_FILE = 0o600;
export const SEARCH_ONLY_DIR = 0o711;
export const POD_GROUP_DIR = 0o710;

/**
 * Makes a per-pod or per-container volatile dir (its parent search-only if missing): root's alone, or
 * with `podGid` (a user-namespaced pod's mapped root group) allowed to pass through it.
 */
export async function makePodDir(path: string, podGid?: number): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: SEARCH_ONLY_DIR });
  await mkdir(path, { mode: PRIVATE_DIR }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EEXIST') throw err;
  });
  await setPodDirAccess(path, podGid, await lstat(path));
}

async function setPodDirAccess(path: string, podGid: number | undefined, st: Stats): Promise<void> {
  const gid = podGid ?? 0;
  if (st.uid !== 0 || st.gid !== gid) await chown(path, 0, gid);
  await chmod(path, podGid === undefined ? PRIVATE_DIR : POD_GROUP_DIR);
}

/** chmod when it is a directory (or file) of that kind and its mode differs; missing is fine. */
async function tighten(path: string, mode: number, kind: 'dir' | 'file'): Promise<boolean> {
  let st;
  try {
    st = await lstat(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
  if (kind === 'dir' ? !st.isDirectory() : !st.isFile()) return false;
  if ((st.mode & 0o7777) === mode) return false;
  await chmod(path, mode);
  return true;
}

async function names(dir: string): Promise<string[]> {
  return readdir(dir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return [];
    throw err;
  });
}

/** The trees under `root` and `state`, created or brought to their modes; returns how many changed. */
export async function tightenStateTrees(root: string, state: string): Promise<number> {
  await mkdir(root, { recursive: true, mode: PRIVATE_DIR });
  await mkdir(state, { recursive: true, mode: SEARCH_ONLY_DIR });
  for (const dir of ['containers', 'sandboxes']) await mkdir(join(state, dir), { mode: SEARCH_ONLY_DIR }).catch(() => {});
  // The OCI runtime would make its own root 0711 on first use; its state files hold every container's spec.
  await mkdir(join(state, 'runc'), { mode: PRIVATE_DIR }).catch(() => {});
  const steps: [string, number, 'dir' | 'file'][] = [
    [root, PRIVATE_DIR, 'dir'],
    [state, SEARCH_ONLY_DIR, 'dir'],
    [join(state, 'containers'), SEARCH_ONLY_DIR, 'dir'],
    [join(state, 'sandboxes'), SEARCH_ONLY_DIR, 'dir'],
  ];
  for (const dir of ['exits', 'attach', 'exec', 'netns', 'pulls', 'runc']) steps.push([join(state, dir), PRIVATE_DIR, 'dir']);
  for (const dir of ['containers', 'sandboxes', 'images', 'cni', 'cni/results', 'quarantine']) steps.push([join(root, dir), PRIVATE_DIR, 'dir']);
  for (const [kind, record] of [['containers', 'container.json'], ['sandboxes', 'sandbox.json']] as const) {
    for (const id of await names(join(root, kind))) {
      steps.push([join(root, kind, id), PRIVATE_DIR, 'dir'], [join(root, kind, id, record), RECORD_FILE, 'file']);
      if (kind === 'containers') steps.push([join(root, kind, id, 'fs'), PRIVATE_DIR, 'dir']);
    }
  }
  const images = join(root, 'images');
  for (const dir of ['blobs', 'layers', 'l', 'records', 'holds']) steps.push([join(images, dir), PRIVATE_DIR, 'dir']);
  for (const name of await names(join(images, 'records'))) steps.push([join(images, 'records', name), RECORD_FILE, 'file']);
  for (const name of await names(join(images, 'holds'))) steps.push([join(images, 'holds', name), RECORD_FILE, 'file']);
  for (const name of await names(join(images, 'layers'))) steps.push([join(images, 'layers', name, 'layer.json'), RECORD_FILE, 'file']);
  let changed = 0;
  for (const [path, mode, kind] of steps) if (await tighten(path, mode, kind)) changed++;
  return changed;
}

/** A per-pod or per-container volatile dir and the mapped root group that may pass through it. */
export interface PodDirAccess {
  path: string;
  podGid?: number;
}

/**
 * Gives each listed dir its owner group and mode (root's alone, or 0710 for a user-namespaced pod's
 * group), and closes any other dir under `<state>/containers` and `<state>/sandboxes` to all but root.
 */
export async function tightenPodDirs(state: string, dirs: PodDirAccess[]): Promise<number> {
  const known = new Map(dirs.map((d) => [d.path, d.podGid]));
  let changed = 0;
  for (const kind of ['containers', 'sandboxes']) {
    for (const id of await names(join(state, kind))) {
      const path = join(state, kind, id);
      const st = await lstat(path).catch(() => undefined);
      if (!st?.isDirectory()) continue;
      const podGid = known.get(path);
      const mode = podGid === undefined ? PRIVATE_DIR : POD_GROUP_DIR;
      if ((st.mode & 0o7777) === mode && st.uid === 0 && st.gid === (podGid ?? 0)) continue;
      await setPodDirAccess(path, podGid, st);
      changed++;
    }
  }
  return changed;
}
