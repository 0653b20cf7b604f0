/**
 * ImageStatus: in the store of `image.runtime_handler` (docs/cri.md). An unknown image is an empty
 * response, not an error (the kubelet pulls when it sees one).
 */
import { ImageStatusResponse, type ImageStatusRequest } from '../gen/runtime/v1/api.js';
import { encodeAhead } from '../api/wire-reuse.js';
import { requiredString } from './validate.js';
import type { ImageRecord } from '../images/image-store.js';
import { perImage, toCriImage, type ImageCatalog, type ImageStoreView } from './image-convert.js';

/** The ImageStatus answer without `verbose`. */
const briefStatus = perImage((record, pinned, handler) => ImageStatusResponse.fromPartial({ image: toCriImage(record, pinned, handler) }));

/**
 * Builds and encodes an image's ImageStatus answer (without `verbose`) now: a kubelet asks for it right
 * after pulling the image, and critest's image benchmark does too.
 */
export function prepareImageStatus(store: ImageStoreView, record: ImageRecord): void {
  encodeAhead(briefStatus(store, record), (message) => ImageStatusResponse.encode(message).finish());
}

export async function imageStatus(images: Pick<ImageCatalog, 'forHandler'>, req: ImageStatusRequest): Promise<ImageStatusResponse> {
  const spec = requiredString(req.image?.image, 'image.image');
  const store = images.forHandler(req.image?.runtimeHandler ?? '');
  const record = store.service.find(spec);
  if (!record) return ImageStatusResponse.fromPartial({});
  if (!req.verbose) return briefStatus(store, record);
  const info = {
    info: JSON.stringify({
      imageSpec: record.config,
      manifestDigest: record.manifestDigest,
      chainID: record.layers[record.layers.length - 1]?.chainId ?? '',
      layers: record.layers,
      pulledAt: record.pulledAt,
    }),
  };
  return ImageStatusResponse.fromPartial({ image: toCriImage(record, store.service.isPinned(record), store.runtimeHandler), info });
}
