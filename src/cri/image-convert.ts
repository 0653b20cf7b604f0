/** ImageRecord → CRI `Image`, shared by the image RPCs. */
import { Image } from '../gen/runtime/v1/api.js';
import { responsePerKey } from '../api/wire-reuse.js';
import type { ImageService } from '../images/image-service.js';
import type { ImageRecord } from '../images/image-store.js';

/** What the query RPCs read from one image store. */
export type ImageQueries = Pick<ImageService, 'list' | 'find' | 'isPinned'>;

/** One image store and the runtime handler its images are reported under (`''`: the shared store). */
export interface ImageStoreView {
  runtimeHandler: string;
  service: ImageQueries;
}

/** What the query RPCs read (images/image-stores.ts): the store a handler names, and every store. */
export interface ImageCatalog {
  /** INVALID_ARGUMENT for a handler that is not configured. */
  forHandler(runtimeHandler: string): ImageStoreView;
  stores(): ImageStoreView[];
}

/** The config's User as the CRI wants it: a numeric uid, or else a user name (never both). */
export function imageUser(user: string | undefined): { uid?: bigint; username: string } {
  const name = (user ?? '').split(':')[0]!;
  if (name === '') return { username: '' };
  if (/^\d+$/.test(name)) return { uid: BigInt(name), username: '' };
  return { username: name };
}

/**
 * `pinned`: whether the image matches `images.pinned` now (not when it was pulled); `runtimeHandler`:
 * the handler whose own store holds it, '' for the shared store (the kubelet's image GC keys its records
 * by image ID and this, and removes with it).
 */
export function toCriImage(record: ImageRecord, pinned: boolean, runtimeHandler: string): Image {
  const user = imageUser(record.config.config?.User);
  return Image.fromPartial({
    id: record.id,
    repoTags: record.repoTags,
    repoDigests: record.repoDigests,
    size: BigInt(record.size),
    uid: user.uid !== undefined ? { value: user.uid } : undefined,
    username: user.username,
    spec: { image: record.id, runtimeHandler, annotations: {} },
    pinned,
  });
}

/**
 * One image's answers, built once per record object and pinned state (a reload may change which
 * images are pinned without changing their records), and encoded once. A record object belongs to one
 * store, so its handler never changes either.
 */
export function perImage<T extends object>(
  build: (record: ImageRecord, pinned: boolean, runtimeHandler: string) => T,
): (store: ImageStoreView, record: ImageRecord) => T {
  const caches = new Map<string, { pinned: (r: ImageRecord) => T; unpinned: (r: ImageRecord) => T }>();
  return (store, record) => {
    let cache = caches.get(store.runtimeHandler);
    if (!cache) {
      const handler = store.runtimeHandler;
      cache = { pinned: responsePerKey((r: ImageRecord) => build(r, true, handler)), unpinned: responsePerKey((r: ImageRecord) => build(r, false, handler)) };
      caches.set(handler, cache);
    }
    return store.service.isPinned(record) ? cache.pinned(record) : cache.unpinned(record);
  };
}
