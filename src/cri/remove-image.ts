/**
 * RemoveImage: by ID, tag or digest, from the store of `image.runtime_handler` only; an unknown image is
 * not an error, as the CRI requires.
 */
import { RemoveImageResponse, type RemoveImageRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import type { ImageStores } from '../images/image-stores.js';

export async function removeImage(images: Pick<ImageStores, 'forHandler'>, req: RemoveImageRequest): Promise<RemoveImageResponse> {
  const spec = requiredString(req.image?.image, 'image.image');
  await images.forHandler(req.image?.runtimeHandler ?? '').service.remove(spec);
  return RemoveImageResponse.fromPartial({});
}
