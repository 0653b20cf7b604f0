/** StreamPodSandboxes: what ListPodSandbox returns, in bounded chunks. */
import { PodSandbox, StreamPodSandboxesResponse, type StreamPodSandboxesRequest } from '../gen/runtime/v1/api.js';
import type { StreamSink } from '../api/handlers.js';
import { writeChunked } from '../api/stream-chunks.js';
import { listPart, selectPodSandboxes, type SandboxReads } from './list-pod-sandbox.js';

export async function streamPodSandboxes(
  sandboxes: SandboxReads,
  req: StreamPodSandboxesRequest,
  sink: StreamSink<StreamPodSandboxesResponse>,
): Promise<void> {
  const items = selectPodSandboxes(sandboxes, req.filter).map((record) => listPart(record).items[0]!);
  await writeChunked(sink, [items], (p) => PodSandbox.encode(p).finish().length, (podSandboxes) => StreamPodSandboxesResponse.fromPartial({ podSandboxes }));
}
