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
import { encodeAhead, encodeAsParts, responsePerKey } from '../api/wire-reuse.js';
import { requiredString } from './validate.js';
import { nowNs } from '../common/clock.js';
import type { ImageService } from '../images/image-service.js';
import type { ImageRecord } from '../images/image-store.js';

/** What the query RPCs read from the image service. */
export type ImageQueries = Pick<ImageService, 'list' | 'find' | 'isPinned'>;
import { toCriImage } from './image-convert.js';

/**
 * One image's answers, built once per record object and pinned state (a reload may change which
 * images are pinned without changing their records), and encoded once.
 */
function perImage<T extends object>(build: (record: ImageRecord, pinned: boolean) => T): (images: ImageQueries, record: ImageRecord) => T {
  const pinned = responsePerKey((record: ImageRecord) => build(record, true));
  const unpinned = responsePerKey((record: ImageRecord) => build(record, false));
  return (images, record) => (images.isPinned(record) ? pinned(record) : unpinned(record));
}

/** The ListImages entry of an image as a one-entry response, concatenated into the full list. */
const listPart = perImage((record, pinned): ListImagesResponse => ({ images: [toCriImage(record, pinned)] }));

/** The ImageStatus answer without `verbose`. */
const briefStatus = perImage((record, pinned) => ImageStatusResponse.fromPartial({ image: toCriImage(record, pinned) }));

/**
 * Builds and encodes an image's ImageStatus answer (without `verbose`) now: a kubelet asks for it right
 * after pulling the image, and critest's image benchmark does too.
 */
export function prepareImageStatus(images: ImageQueries, record: ImageRecord): void {
  encodeAhead(briefStatus(images, record), (message) => ImageStatusResponse.encode(message).finish());
}

export async function listImages(images: ImageQueries, req: ListImagesRequest): Promise<ListImagesResponse> {
  const parts = selectImages(images, req.filter).map((record) => listPart(images, record));
  return encodeAsParts({ images: parts.map((p) => p.images[0]!) }, parts);
}

/** What ListImages returns, in bounded chunks. */
export async function streamImages(images: ImageQueries, req: StreamImagesRequest, sink: StreamSink<StreamImagesResponse>): Promise<void> {
  const items = selectImages(images, req.filter).map((record) => listPart(images, record).images[0]!);
  await writeChunked(sink, [items], (i) => Image.encode(i).finish().length, (chunk) => StreamImagesResponse.fromPartial({ images: chunk }));
}

function selectImages(images: ImageQueries, filter: ImageFilter | undefined): ImageRecord[] {
  const wanted = filter?.image?.image;
  return wanted ? [images.find(wanted)].filter((r) => r !== undefined) : images.list();
}

/** An unknown image is an empty response, not an error (the kubelet pulls when it sees one). */
export async function imageStatus(images: ImageQueries, req: ImageStatusRequest): Promise<ImageStatusResponse> {
  const spec = requiredString(req.image?.image, 'image.image');
  const record = images.find(spec);
  if (!record) return ImageStatusResponse.fromPartial({});
  if (!req.verbose) return briefStatus(images, record);
  const info = {
    info: JSON.stringify({
      imageSpec: record.config,
      manifestDigest: record.manifestDigest,
      chainID: record.layers[record.layers.length - 1]?.chainId ?? '',
      layers: record.layers,
      pulledAt: record.pulledAt,
    }),
  };
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
