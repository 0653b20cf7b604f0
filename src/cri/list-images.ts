/**
 * ListImages: the images of every store, each reported under its store's runtime handler, or what the
 * filter names in the store of its handler; each entry encoded once per record object.
 */
import { ListImagesResponse, type ImageFilter, type ListImagesRequest } from '../gen/runtime/v1/api.js';
import { encodeAsParts } from '../api/wire-reuse.js';
import type { ImageRecord } from '../images/image-store.js';
import { perImage, toCriImage, type ImageCatalog, type ImageStoreView } from './image-convert.js';

/** The ListImages entry of an image as a one-entry response, concatenated into the full list. */
export const listPart = perImage((record, pinned, handler): ListImagesResponse => ({ images: [toCriImage(record, pinned, handler)] }));

export async function listImages(images: ImageCatalog, req: ListImagesRequest): Promise<ListImagesResponse> {
  const parts = selectImages(images, req.filter).map(({ store, record }) => listPart(store, record));
  return encodeAsParts({ images: parts.map((p) => p.images[0]!) }, parts);
}

/**
 * The images a filter selects: the one it names (in its handler's store), every image of the store a
 * filter with only a handler names, or every image of every store.
 */
export function selectImages(images: ImageCatalog, filter: ImageFilter | undefined): { store: ImageStoreView; record: ImageRecord }[] {
  const wanted = filter?.image?.image;
  const handler = filter?.image?.runtimeHandler ?? '';
  if (wanted) {
    const store = images.forHandler(handler);
    const record = store.service.find(wanted);
    return record ? [{ store, record }] : [];
  }
  const stores = handler ? [images.forHandler(handler)] : images.stores();
  return stores.flatMap((store) => store.service.list().map((record) => ({ store, record })));
}
