/** ListImages, StreamImages, ImageStatus and ImageFsInfo. */
import {
  Image,
  ImageFsInfoResponse,
  StreamImagesResponse,
  type ImageFilter,
  type StreamImagesRequest,
  ImageStatusResponse,
  ListImagesResponse,
  type ImageStatusRequest,
  type ListImagesRequest,
} from '../gen/runtime/v1/api.js';
import type { StreamSink } from '../api/handlers.js';
import { writeChunked } from '../api/stream-chunks.js';
import { requiredString } from './validate.js';
import { nowNs } from '../common/clock.js';
import type { ImageService } from '../images/image-service.js';
import { toCriImage } from './image-convert.js';

export async function listImages(images: ImageService, req: ListImagesRequest): Promise<ListImagesResponse> {
  return ListImagesResponse.fromPartial({ images: selectImages(images, req.filter) });
}

/** What ListImages returns, in bounded chunks. */
export async function streamImages(images: ImageService, req: StreamImagesRequest, sink: StreamSink<StreamImagesResponse>): Promise<void> {
  const items = selectImages(images, req.filter);
  await writeChunked(sink, [items], (i) => Image.encode(i).finish().length, (chunk) => StreamImagesResponse.fromPartial({ images: chunk }));
}

function selectImages(images: ImageService, filter: ImageFilter | undefined): Image[] {
  const wanted = filter?.image?.image;
  const records = wanted ? [images.find(wanted)].filter((r) => r !== undefined) : images.list();
  return records.map((r) => toCriImage(r, images.isPinned(r)));
}

/** An unknown image is an empty response, not an error (the kubelet pulls when it sees one). */
export async function imageStatus(images: ImageService, req: ImageStatusRequest): Promise<ImageStatusResponse> {
  const spec = requiredString(req.image?.image, 'image.image');
  const record = images.find(spec);
  if (!record) return ImageStatusResponse.fromPartial({});
  const info: Record<string, string> = {};
  if (req.verbose) {
    info.info = JSON.stringify({
      imageSpec: record.config,
      manifestDigest: record.manifestDigest,
      chainID: record.layers[record.layers.length - 1]?.chainId ?? '',
      layers: record.layers,
      pulledAt: record.pulledAt,
    });
  }
  return ImageStatusResponse.fromPartial({ image: toCriImage(record, images.isPinned(record)), info });
}

export async function imageFsInfo(images: ImageService): Promise<ImageFsInfoResponse> {
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
