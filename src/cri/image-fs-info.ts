/** ImageFsInfo: the space images and containers' writable layers use, per filesystem. */
import { ImageFsInfoResponse } from '../gen/runtime/v1/api.js';
import { nowNs } from '../common/clock.js';
import type { ImageService } from '../images/image-service.js';

export async function imageFsInfo(images: Pick<ImageService, 'fsInfo'>): Promise<ImageFsInfoResponse> {
  const usage = await images.fsInfo();
  const timestamp = nowNs();
  const fs = (u: { mountpoint: string; bytes: bigint; inodes: bigint }) => ({
    timestamp,
    fsId: { mountpoint: u.mountpoint },
    usedBytes: { value: u.bytes },
    inodesUsed: { value: u.inodes },
  });
  return ImageFsInfoResponse.fromPartial({ imageFilesystems: [fs(usage.images)], containerFilesystems: [fs(usage.containers)] });
}
