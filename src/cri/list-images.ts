/** ListImages: every image, or the one a filter names, each entry encoded once per record object. */
import { ListImagesResponse, type ImageFilter, type ListImagesRequest } from '../gen/runtime/v1/api.js';
import { encodeAsParts } from '../api/wire-reuse.js';
import type { ImageRecord } from '../images/image-store.js';
import { perImage, toCriImage, type ImageQueries } from './image-convert.js';

/** The ListImages entry of an image as a one-entry response, concatenated into the full list. */
export const listPart = perImage((record, pinned): ListImagesResponse => ({ images: [toCriImage(record, pinned)] }));

export async function listImages(images: ImageQueries, req: ListImagesRequest): Promise<ListImagesResponse> {
  const parts = selectImages(images, req.filter).map((record) => listPart(images, record));
  return encodeAsParts({ images: parts.map((p) => p.images[0]!) }, parts);
}

/** The images a filter selects: the one it names, or all. */
export function selectImages(images: ImageQueries, filter: ImageFilter | undefined): ImageRecord[] {
  const wanted = filter?.image?.image;
  return wanted ? [images.find(wanted)].filter((r) => r !== undefined) : images.list();
}
