/** PullImage. */
import { PullImageResponse, type PullImageRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import { prepareImageStatus } from './image-status.js';
import type { ImageService } from '../images/image-service.js';

/** `signal`: the client left or its deadline passed; the download stops unless another caller waits for it. */
export async function pullImage(images: ImageService, req: PullImageRequest, signal?: AbortSignal): Promise<PullImageResponse> {
  const image = requiredString(req.image?.image, 'image.image');
  const record = await images.pull(image, req.auth, req.sandboxConfig?.metadata?.namespace || undefined, signal);
  prepareImageStatus(images, record);
  return PullImageResponse.fromPartial({ imageRef: record.id });
}
