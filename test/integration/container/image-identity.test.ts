/**
 * One image identity (the kubelet's pull-credential verification, KEP-2535, on by default from 1.35):
 * PullImageResponse.image_ref, Image.id (ImageStatus, ListImages), ContainerStatus.image_id,
 * Container.image_id (ListContainers) and the container statuses of GetContainerEvents name one image by
 * one ID — its config digest — however it was pulled: by tag or by digest, under two repository names,
 * from two registries, as a manifest or through an index. Real registries on loopback, real containers.
 */
import assert from 'node:assert/strict';
import {
  ContainerEventType,
  ContainerFilter,
  ImageSpec,
  PullImageRequest,
  type ContainerEventResponse,
} from '../../../src/gen/runtime/v1/api.js';
import { startRegistry, type TestRegistry } from '../../helpers/registry.js';
import { pushBusyboxImage, pushIndex, type PushedImage } from '../../helpers/image-builder.js';
import { containerSuite, ContainerWorld, eventually } from './world.js';

/** The same content pushed to `registry` as `name`: deterministic layers and config, so one config digest. */
const content = { cmd: ['sleep', '3600'], labels: { 'stove.test': 'one image identity' } };
const push = (registry: TestRegistry, name: string, untagged = false) => pushBusyboxImage(registry, name, { ...content, untagged });

describe('images: one identity across APIs, references and registries (real registries, runc, conmon)', function () {
  this.timeout(120_000);
  const world = new ContainerWorld();
  let other: TestRegistry;
  let pod: Awaited<ReturnType<ContainerWorld['pod']>>;
  let byTag: PushedImage;
  let otherRepo: PushedImage;
  let otherRegistry: PushedImage;
  let viaIndex: string;
  const events: ContainerEventResponse[] = [];

  containerSuite(world, 'image identity tests', {
    scope: 'containers',
    setup: async () => {
      other = await startRegistry();
      byTag = await push(world.registry, 'identity/app:1');
      otherRepo = await push(world.registry, 'identity/copy:2');
      otherRegistry = await push(other, 'identity/app:1');
      const platformManifest = await push(other, 'identity/multi', true);
      viaIndex = (await pushIndex(other, 'identity/multi:1', [platformManifest])).reference;
      for (const p of [otherRepo, otherRegistry, platformManifest]) assert.equal(p.configDigest, byTag.configDigest, 'the same content');
      pod = await world.pod();
      const call = world.daemon.clients.rawRuntime.getContainerEvents({});
      const live = new Promise<void>((resolve) => call.once('metadata', () => resolve()));
      call.on('data', (e: ContainerEventResponse) => events.push(e));
      call.on('error', () => {});
      await live;
    },
  });
  after(async () => {
    await other?.stop();
  });

  /** Every ID the CRI reports for the image `reference` names, through a pull and a container made from it. */
  async function identities(reference: string): Promise<Record<string, string>> {
    const { image, runtime } = world.daemon.clients;
    const pulled = (await image.pullImage(PullImageRequest.fromPartial({ image: { image: reference } }))).imageRef;
    const status = (await image.imageStatus({ image: ImageSpec.fromPartial({ image: reference }), verbose: false })).image!;
    const listed = (await image.listImages({ filter: undefined })).images.filter((i) => i.repoDigests.some((d) => d.endsWith(`@${byTag.manifestDigest}`)));
    assert.equal(listed.length, 1, `one image holds the content: ${listed.map((i) => i.id).join(' ')}`);
    const id = await world.create(pod, world.config('busybox', { image: { image: reference } }));
    const container = (await world.status(id)).status!;
    const entry = (await runtime.listContainers({ filter: ContainerFilter.fromPartial({ id }) })).containers[0]!;
    await eventually(`the CREATED event of ${id}`, async () => events.some((e) => e.containerId === id));
    const created = events.find((e) => e.containerId === id && e.containerEventType === ContainerEventType.CONTAINER_CREATED_EVENT)!;
    await runtime.removeContainer({ containerId: id });
    return {
      'PullImageResponse.image_ref': pulled,
      'ImageStatus Image.id': status.id,
      'ListImages Image.id': listed[0]!.id,
      'ContainerStatus.image_id': container.imageId,
      'ListContainers Container.image_id': entry.imageId,
      'GetContainerEvents ContainerStatus.image_id': created.containersStatuses.find((s) => s.id === id)!.imageId,
    };
  }

  /** Both references of a pair give the config digest in every API. */
  async function sameIdentity(a: string, b: string): Promise<void> {
    for (const reference of [a, b]) {
      const ids = await identities(reference);
      for (const [api, value] of Object.entries(ids)) assert.equal(value, byTag.configDigest, `${api} for ${reference}`);
    }
  }

  it('by tag and by digest', async () => {
    await sameIdentity(byTag.reference, byTag.digestReference);
  });

  it('under two repository names of one registry', async () => {
    await sameIdentity(byTag.reference, otherRepo.reference);
    const status = (await world.daemon.clients.image.imageStatus({ image: ImageSpec.fromPartial({ image: otherRepo.reference }), verbose: false })).image!;
    assert.ok(status.repoTags.includes(byTag.reference) && status.repoTags.includes(otherRepo.reference), status.repoTags.join(' '));
  });

  it('from two registries', async () => {
    await sameIdentity(byTag.reference, otherRegistry.reference);
    await sameIdentity(byTag.digestReference, otherRegistry.digestReference);
    const status = (await world.daemon.clients.image.imageStatus({ image: ImageSpec.fromPartial({ image: byTag.configDigest }), verbose: false })).image!;
    assert.ok(status.repoDigests.includes(byTag.digestReference) && status.repoDigests.includes(otherRegistry.digestReference), status.repoDigests.join(' '));
  });

  it('as a platform manifest and through an index of another registry', async () => {
    await sameIdentity(byTag.reference, viaIndex);
  });

  it('after a remove by one tag, a pull from the other registry brings back the same ID', async () => {
    const { image } = world.daemon.clients;
    await image.removeImage({ image: ImageSpec.fromPartial({ image: otherRegistry.reference }) });
    const gone = await image.imageStatus({ image: ImageSpec.fromPartial({ image: byTag.reference }), verbose: false });
    assert.equal(gone.image, undefined, 'removed with all its tags');
    await sameIdentity(otherRegistry.reference, byTag.reference);
  });
});
