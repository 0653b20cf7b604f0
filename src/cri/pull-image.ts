/** PullImage: into the store of `image.runtime_handler` (docs/cri.md). */
import { PullImageResponse, type PullImageRequest } from '../gen/runtime/v1/api.js';
import { requiredString } from './validate.js';
import { prepareImageStatus } from './image-status.js';
import type { ImageStores } from '../images/image-stores.js';

/** `signal`: the client left or its deadline passed; the download stops unless another caller waits for it. */
export async function pullImage(images: Pick<ImageStores, 'forHandler'>, req: PullImageRequest, signal?: AbortSignal): Promise<PullImageResponse> {
  const image = requiredString(req.image?.image, 'image.image');
  const store = images.forHandler(req.image?.runtimeHandler ?? '');
  const record = await store.service.pull(image, req.auth, req.sandboxConfig?.metadata?.namespace || undefined, signal);
  prepareImageStatus(store, record);
  return PullImageResponse.fromPartial({ imageRef: record.id });
}
