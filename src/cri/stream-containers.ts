/** StreamContainers: what ListContainers returns, in bounded chunks. */
import { Container, StreamContainersResponse, type StreamContainersRequest } from '../gen/runtime/v1/api.js';
import type { StreamSink } from '../api/handlers.js';
import { writeChunked } from '../api/stream-chunks.js';
import { toCriContainer } from './container-convert.js';
import { filterContainers } from './list-containers.js';
import type { ContainerService } from '../container/service.js';
import type { SandboxLookup } from '../container/deps.js';

export async function streamContainers(
  containers: Pick<ContainerService, 'find' | 'list'>,
  sandboxes: SandboxLookup,
  req: StreamContainersRequest,
  sink: StreamSink<StreamContainersResponse>,
): Promise<void> {
  const items = filterContainers(containers, sandboxes, req.filter).map(toCriContainer);
  await writeChunked(sink, [items], (c) => Container.encode(c).finish().length, (chunk) => StreamContainersResponse.fromPartial({ containers: chunk }));
}
