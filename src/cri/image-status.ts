/** ImageStatus: an unknown image is an empty response, not an error (the kubelet pulls when it sees one). */
import { ImageStatusResponse, type ImageStatusRequest } from '../gen/runtime/v1/api.js';
import { encodeAhead } from '../api/wire-reuse.js';
import { requiredString } from './validate.js';
import type { ImageRecord } from '../images/image-store.js';
import { perImage, toCriImage, type ImageQueries } from './image-convert.js';

/** The ImageStatus answer without `verbose`. */
const briefStatus = perImage((record, pinned) => ImageStatusResponse.fromPartial({ image: toCriImage(record, pinned) }));

/**
 * Builds and encodes an image's ImageStatus answer (without `verbose`) now: a kubelet asks for it right
 * after pulling the image, and critest's image benchmark does too.
 */
export function prepareImageStatus(images: ImageQueries, record: ImageRecord): void {
  encodeAhead(briefStatus(images, record), (message) => ImageStatusResponse.encode(message).finish());
}

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
