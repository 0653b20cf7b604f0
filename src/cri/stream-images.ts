/** StreamImages: what ListImages returns, in bounded chunks. */
import { Image, StreamImagesResponse, type StreamImagesRequest } from '../gen/runtime/v1/api.js';
import type { StreamSink } from '../api/handlers.js';
import { writeChunked } from '../api/stream-chunks.js';
import type { ImageCatalog } from './image-convert.js';
import { listPart, selectImages } from './list-images.js';

export async function streamImages(images: ImageCatalog, req: StreamImagesRequest, sink: StreamSink<StreamImagesResponse>): Promise<void> {
  const items = selectImages(images, req.filter).map(({ store, record }) => listPart(store, record).images[0]!);
  await writeChunked(sink, [items], (i) => Image.encode(i).finish().length, (chunk) => StreamImagesResponse.fromPartial({ images: chunk }));
}
