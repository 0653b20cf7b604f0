/** RemoveImage: by ID, tag or digest; an unknown image is not an error, as the CRI requires. */
import { RemoveImageResponse, type RemoveImageRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import type { ImageService } from '../images/image-service.js';

export async function removeImage(images: ImageService, req: RemoveImageRequest): Promise<RemoveImageResponse> {
  const spec = requiredString(req.image?.image, 'image.image');
  await images.remove(spec);
  return RemoveImageResponse.fromPartial({});
}
