/** PullImage. */
import { PullImageResponse, type PullImageRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import type { ImageService } from '../images/image-service.js';

export async function pullImage(images: ImageService, req: PullImageRequest): Promise<PullImageResponse> {
  const image = requiredString(req.image?.image, 'image.image');
  const record = await images.pull(image, req.auth, req.sandboxConfig?.metadata?.namespace || undefined);
  return PullImageResponse.fromPartial({ imageRef: record.id });
}
