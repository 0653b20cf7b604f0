/**
 * The Stream* list RPCs of Kubernetes 1.36 against their unary twins on a real daemon: the same items
 * for the same filters, in several bounded messages when there are many (hundreds of images; pods and
 * containers whose annotations pass the per-message byte bound).
 */
import assert from 'node:assert/strict';
import type { ClientReadableStream } from '@grpc/grpc-js';
import * as api from '../../../src/gen/runtime/v1/api.js';
import { ContainerState, ImageFilter, ImageSpec, PullImageRequest, StreamImagesResponse, type ContainerFilter } from '../../../src/gen/runtime/v1/api.js';
import { STREAM_CHUNK_LIMITS } from '../../../src/api/stream-chunks.js';
import { collect } from '../../helpers/cri-client.js';
import { pushImage } from '../../helpers/image-builder.js';
import { containerSuite, ContainerWorld } from './world.js';

/** Annotations of about `bytes` bytes, so a few objects fill a message. */
function bulky(bytes: number, tag: string): Record<string, string> {
  return { 'stove.test/bulk': tag.padEnd(bytes, 'x') };
}

const byId = <T extends { id: string }>(a: T[]) => [...a].sort((x, y) => x.id.localeCompare(y.id));
const byAttrId = <T extends { attributes?: { id: string } }>(a: T[]) => [...a].sort((x, y) => x.attributes!.id.localeCompare(y.attributes!.id));

describe('Stream* list RPCs against their unary twins (real daemon)', function () {
  this.timeout(300_000);
  const world = new ContainerWorld();
  const pods: Awaited<ReturnType<ContainerWorld['pod']>>[] = [];
  const IMAGE_COUNT = 300;
  const CONTAINERS_PER_POD = 12;

  containerSuite(world, 'stream tests', {
    scope: 'containers',
    setup: async () => {
      // Three pods, each with annotations of a third of the byte bound: one message cannot hold them all.
      for (let i = 0; i < 3; i++) pods.push(await world.pod({ labels: { group: i < 2 ? 'a' : 'b' }, annotations: bulky(STREAM_CHUNK_LIMITS.maxBytes / 3 + 1000, `pod${i}`) }));
    },
  });

  /** Each stream's messages: all must be within the bounds; returns them. */
  async function chunks<T>(call: ClientReadableStream<T>, itemsOf: (m: T) => unknown[], encodedSize: (m: T) => number): Promise<T[]> {
    const messages = await collect(call);
    for (const m of messages) {
      assert.ok(itemsOf(m).length > 0 && itemsOf(m).length <= STREAM_CHUNK_LIMITS.maxItems, 'items per message');
      // One item may be alone past the byte bound; several never are.
      if (itemsOf(m).length > 1) assert.ok(encodedSize(m) <= STREAM_CHUNK_LIMITS.maxBytes + 64, `message of ${encodedSize(m)} bytes`);
    }
    return messages;
  }

  it('StreamImages returns ListImages in chunks of at most 256 images', async () => {
    const layer = [{ type: 'file' as const, path: 'hello.txt', content: 'hello' }];
    const refs: string[] = [];
    for (let i = 0; i < IMAGE_COUNT; i++) {
      refs.push((await pushImage(world.registry, `many/img${i}:1`, { layers: [layer], labels: { n: String(i) } })).reference);
    }
    for (let i = 0; i < refs.length; i += 10) {
      await Promise.all(refs.slice(i, i + 10).map((image) => world.daemon.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image } }))));
    }
    const unary = (await world.daemon.clients.image.listImages({ filter: undefined })).images;
    assert.ok(unary.length >= IMAGE_COUNT);
    const messages = await chunks(world.daemon.clients.rawImage.streamImages({ filter: undefined }), (m) => m.images, (m) => StreamImagesResponse.encode(m).finish().length);
    assert.ok(messages.length >= 2, `${messages.length} messages`);
    assert.deepEqual(byId(messages.flatMap((m) => m.images)), byId(unary));
    // A filter selects the same image both ways.
    const one = ImageFilter.fromPartial({ image: { image: refs[7]! } });
    const filtered = (await collect(world.daemon.clients.rawImage.streamImages({ filter: one }))).flatMap((m) => m.images);
    assert.deepEqual(filtered, (await world.daemon.clients.image.listImages({ filter: one })).images);
    assert.equal(filtered.length, 1);
    for (const image of refs) await world.daemon.clients.image.removeImage({ image: ImageSpec.fromPartial({ image }) });
  });

  it('StreamPodSandboxes, StreamContainers and both stats streams match their unary twins, filters included', async () => {
    const rt = world.daemon.clients.runtime;
    const raw = world.daemon.clients.rawRuntime;
    // Containers whose annotations fill a message every ~12: several messages for each container list.
    for (const [p, pod] of pods.entries()) {
      for (let i = 0; i < CONTAINERS_PER_POD; i++) {
        const config = world.config('sleeper', { metadata: { name: `c${p}-${i}` }, labels: { even: String(i % 2 === 0) }, annotations: bulky(100_000, `c${p}-${i}`) });
        if (i % 3 === 0) await world.create(pod, config);
        else await world.run(pod, config);
      }
    }

    const podsUnary = (await rt.listPodSandbox({ filter: undefined })).items;
    const podMessages = await chunks(raw.streamPodSandboxes({ filter: undefined }), (m) => m.podSandboxes, (m) => api.StreamPodSandboxesResponse.encode(m).finish().length);
    assert.ok(podMessages.length >= 2);
    assert.deepEqual(podMessages.flatMap((m) => m.podSandboxes), podsUnary);
    const groupA = api.PodSandboxFilter.fromPartial({ labelSelector: { group: 'a' } });
    assert.deepEqual((await collect(raw.streamPodSandboxes({ filter: groupA }))).flatMap((m) => m.podSandboxes), (await rt.listPodSandbox({ filter: groupA })).items);

    const filters: (Partial<ContainerFilter> | undefined)[] = [
      undefined,
      { podSandboxId: pods[1]!.id },
      { state: { state: ContainerState.CONTAINER_CREATED } },
      { labelSelector: { even: 'true' }, podSandboxId: pods[0]!.id.slice(0, 12) },
    ];
    for (const f of filters) {
      const filter = f ? api.ContainerFilter.fromPartial(f) : undefined;
      const unary = (await rt.listContainers({ filter })).containers;
      const streamed = (await chunks(raw.streamContainers({ filter }), (m) => m.containers, (m) => api.StreamContainersResponse.encode(m).finish().length)).flatMap((m) => m.containers);
      assert.deepEqual(streamed, unary, JSON.stringify(f));
    }
    assert.ok((await collect(raw.streamContainers({ filter: undefined }))).length >= 3);

    // Stats: the same objects (values move between two readings, so compare identities and attributes).
    const statsUnary = (await rt.listContainerStats({ filter: undefined })).stats;
    const statsMessages = await chunks(raw.streamContainerStats({ filter: undefined }), (m) => m.containerStats, (m) => api.StreamContainerStatsResponse.encode(m).finish().length);
    assert.ok(statsMessages.length >= 2);
    assert.deepEqual(byAttrId(statsMessages.flatMap((m) => m.containerStats)).map((s) => s.attributes), byAttrId(statsUnary).map((s) => s.attributes));
    const podFilter = api.ContainerStatsFilter.fromPartial({ podSandboxId: pods[2]!.id });
    assert.deepEqual(
      byAttrId((await collect(raw.streamContainerStats({ filter: podFilter }))).flatMap((m) => m.containerStats)).map((s) => s.attributes!.id),
      byAttrId((await rt.listContainerStats({ filter: podFilter })).stats).map((s) => s.attributes!.id),
    );

    const podStatsUnary = (await rt.listPodSandboxStats({ filter: undefined })).stats;
    const podStatsMessages = await chunks(raw.streamPodSandboxStats({ filter: undefined }), (m) => m.podSandboxStats, (m) => api.StreamPodSandboxStatsResponse.encode(m).finish().length);
    assert.ok(podStatsMessages.length >= 2);
    const streamedPods = byAttrId(podStatsMessages.flatMap((m) => m.podSandboxStats));
    assert.deepEqual(streamedPods.map((s) => s.attributes), byAttrId(podStatsUnary).map((s) => s.attributes));
    assert.deepEqual(streamedPods.map((s) => s.linux!.containers.length), byAttrId(podStatsUnary).map((s) => s.linux!.containers.length));
    const one = api.PodSandboxStatsFilter.fromPartial({ id: pods[0]!.id });
    assert.deepEqual((await collect(raw.streamPodSandboxStats({ filter: one }))).flatMap((m) => m.podSandboxStats).map((s) => s.attributes!.id), [pods[0]!.id]);
  });
});
