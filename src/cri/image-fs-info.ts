/**
 * ImageFsInfo: the space images and containers' writable layers use, per filesystem: one
 * `image_filesystems` entry per image store (the shared one first; the kubelet reads the first), one
 * `container_filesystems` entry for the writable layers.
 */
import { ImageFsInfoResponse } from '../gen/runtime/v1/api.js';
import { nowNs } from '../common/clock.js';
import type { ImageStores } from '../images/image-stores.js';

export async function imageFsInfo(images: Pick<ImageStores, 'fsInfo'>): Promise<ImageFsInfoResponse> {
  const usage = await images.fsInfo();
  const timestamp = nowNs();
  const fs = (u: { mountpoint: string; bytes: bigint; inodes: bigint }) => ({
    timestamp,
    fsId: { mountpoint: u.mountpoint },
    usedBytes: { value: u.bytes },
    inodesUsed: { value: u.inodes },
  });
  return ImageFsInfoResponse.fromPartial({ imageFilesystems: usage.images.map(fs), containerFilesystems: [fs(usage.containers)] });
}
