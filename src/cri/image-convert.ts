/** ImageRecord → CRI `Image`, shared by the image RPCs. */
import { Image } from '../gen/runtime/v1/api.js';
import { responsePerKey } from '../api/wire-reuse.js';
import type { ImageService } from '../images/image-service.js';
import type { ImageRecord } from '../images/image-store.js';

/** What the query RPCs read from the image service. */
export type ImageQueries = Pick<ImageService, 'list' | 'find' | 'isPinned'>;

/** The config's User as the CRI wants it: a numeric uid, or else a user name (never both). */
export function imageUser(user: string | undefined): { uid?: bigint; username: string } {
  const name = (user ?? '').split(':')[0]!;
  if (name === '') return { username: '' };
  if (/^\d+$/.test(name)) return { uid: BigInt(name), username: '' };
  return { username: name };
}

/** `pinned`: whether the image matches `images.pinned` now (not when it was pulled). */
export function toCriImage(record: ImageRecord, pinned: boolean): Image {
  const user = imageUser(record.config.config?.User);
  return Image.fromPartial({
    id: record.id,
    repoTags: record.repoTags,
    repoDigests: record.repoDigests,
    size: BigInt(record.size),
    uid: user.uid !== undefined ? { value: user.uid } : undefined,
    username: user.username,
    spec: { image: record.id, annotations: {} },
    pinned,
  });
}

/**
 * One image's answers, built once per record object and pinned state (a reload may change which
 * images are pinned without changing their records), and encoded once.
 */
export function perImage<T extends object>(build: (record: ImageRecord, pinned: boolean) => T): (images: ImageQueries, record: ImageRecord) => T {
  const pinned = responsePerKey((record: ImageRecord) => build(record, true));
  const unpinned = responsePerKey((record: ImageRecord) => build(record, false));
  return (images, record) => (images.isPinned(record) ? pinned(record) : unpinned(record));
}
