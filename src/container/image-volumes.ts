/**
 * Image volumes (KEP-4639, GA in Kubernetes 1.36): a CRI mount naming an image instead of a host path
 * gets that image's root filesystem (or `image_sub_path` inside it), read-only, nosuid and nodev (not
 * noexec: cri-api v0.36 dropped it), from the unpacked layers without a copy. The image must be present (the kubelet pulls it
 * first); the container holds it until it is removed, so RemoveImage refuses it meanwhile.
 *
 * Each volume is an overlay mounted at `<bundle>/image-volumes/<n>` (images/image-service.ts), which
 * outlives a daemon restart like the root filesystem does, and is bind-mounted into the container.
 */
import { stat } from 'node:fs/promises';
import { join, posix } from 'node:path';
import type { Mount as CriMount } from '../gen/runtime/v1/api.js';
import { invalidArgument, isKind, notFound, wrap } from '../common/errors.js';
import { resolveInRoot } from '../platform/resolve-in-root.js';
import type { ContainerImages } from './deps.js';
import type { ImageVolumeRecord } from './model.js';

/** Longest image_sub_path accepted (PATH_MAX). */
const MAX_SUB_PATH = 4096;

/** Request checks for image mounts, before anything exists. */
export function checkImageMounts(mounts: readonly CriMount[]): void {
  for (const m of mounts) {
    const image = m.image?.image ?? '';
    if (!image) {
      if (m.imageSubPath) throw invalidArgument(`mounts: image_sub_path "${m.imageSubPath}" for "${m.containerPath}" needs an image`);
      continue;
    }
    if (m.hostPath) throw invalidArgument(`mounts: "${m.containerPath}" names both host_path "${m.hostPath}" and image "${image}"; an image volume has no host path`);
    if (!m.containerPath.startsWith('/')) throw invalidArgument(`mounts: container_path "${m.containerPath}" must be an absolute path`);
    checkSubPath(m.imageSubPath, image);
  }
}

function checkSubPath(subPath: string, image: string): void {
  if (!subPath) return;
  const what = `image_sub_path "${subPath}" of image volume "${image}"`;
  if (subPath.length > MAX_SUB_PATH || subPath.includes('\0')) throw invalidArgument(`${what.slice(0, 200)} is not a valid path`);
  if (posix.isAbsolute(subPath)) throw invalidArgument(`${what} must be relative to the image's root`);
  if (subPath.split('/').includes('..')) throw invalidArgument(`${what} must not contain ".."`);
}

/** True when the request has an image volume. */
export function hasImageVolumes(mounts: readonly CriMount[]): boolean {
  return mounts.some((m) => !!m.image?.image);
}

/**
 * Mounts every image volume of `mounts` (from the store of the pod's `runtimeHandler`) under `volumesDir`
 * for container `containerId` and returns the
 * mounts with each image volume turned into a read-only bind of its source, plus the records. On
 * failure what was mounted stays held: the caller's `removeRootfs` undoes it.
 */
export async function mountImageVolumes(
  images: Pick<ContainerImages, 'mountImageVolume'>,
  containerId: string,
  runtimeHandler: string,
  mounts: readonly CriMount[],
  volumesDir: string,
): Promise<{ mounts: CriMount[]; volumes: ImageVolumeRecord[] }> {
  const out: CriMount[] = [];
  const volumes: ImageVolumeRecord[] = [];
  for (const [index, m] of mounts.entries()) {
    const spec = m.image?.image ?? '';
    if (!spec) {
      out.push(m);
      continue;
    }
    const target = join(volumesDir, String(index));
    let image;
    try {
      image = await images.mountImageVolume(spec, containerId, index, target, runtimeHandler);
    } catch (err) {
      if (isKind(err, 'NotFound')) throw notFound(`image volume "${spec}" for "${m.containerPath}": image not found, pull it first`, err);
      throw err;
    }
    const source = m.imageSubPath ? await subPathSource(target, m.imageSubPath, spec) : target;
    volumes.push({ mount: index, image: spec, imageId: image.id, imageRef: image.repoDigests[0] ?? image.id, subPath: m.imageSubPath, source });
    out.push(imageVolumeBind(m, source));
  }
  return { mounts: out, volumes };
}

/** The bind the spec gets for an image volume (always read-only; host_path is the mounted source). */
export function imageVolumeBind(m: CriMount, source: string): CriMount {
  return { ...m, hostPath: source, readonly: true, recursiveReadOnly: false, selinuxRelabel: false };
}

/** The directory `subPath` names inside the mounted image, never outside it. */
async function subPathSource(root: string, subPath: string, image: string): Promise<string> {
  const what = `image_sub_path "${subPath}" of image volume "${image}"`;
  const path = await resolveInRoot(root, subPath, what);
  let isDir: boolean;
  try {
    isDir = (await stat(path)).isDirectory();
  } catch (err) {
    throw wrap(err, `failed to inspect ${what}`);
  }
  if (!isDir) throw invalidArgument(`${what} is not a directory`);
  return path;
}

/** The status view of the request's mounts: image volumes report their image_ref and are read-only. */
export function statusMounts(mounts: readonly CriMount[], volumes: readonly ImageVolumeRecord[] | undefined): CriMount[] {
  if (!volumes?.length) return [...mounts];
  return mounts.map((m, index) => {
    const v = volumes.find((x) => x.mount === index);
    if (!v || !m.image) return m;
    return { ...m, readonly: true, image: { ...m.image, imageRef: v.imageRef } };
  });
}
