/**
 * The query RPCs answer from responses built and encoded once per record: every change to a container,
 * a pod or an image (or to which images are pinned) shows in the very next answer, on the wire.
 */
import assert from 'node:assert/strict';
import {
  ContainerConfig,
  ContainerState,
  ContainerStatusResponse,
  ImageServiceService,
  ImageStatusRequest,
  ImageStatusResponse,
  ListContainersResponse,
  ListImagesResponse,
  ListPodSandboxResponse,
  PodSandboxConfig,
  PodSandboxFilter,
  PodSandboxState,
  PodSandboxStatusResponse,
  RuntimeServiceService,
} from '../../../src/gen/runtime/v1/api.js';
import { withWireReuse } from '../../../src/api/wire-reuse.js';
import { containerStatus } from '../../../src/cri/container-status.js';
import { listContainers } from '../../../src/cri/list-containers.js';
import { listPodSandbox } from '../../../src/cri/list-pod-sandbox.js';
import { podSandboxStatus } from '../../../src/cri/pod-sandbox-status.js';
import { imageStatus } from '../../../src/cri/image-status.js';
import { listImages } from '../../../src/cri/list-images.js';
import type { ImageQueries } from '../../../src/cri/image-convert.js';
import { PinnedImages } from '../../../src/images/pinned.js';
import type { ImageRecord } from '../../../src/images/image-store.js';
import { harness as containerHarness, IMAGE_NAME, type Harness as ContainerHarness } from '../container/fakes.js';
import { Harness as SandboxHarness } from '../sandbox/fakes.js';

const runtime = withWireReuse(RuntimeServiceService);
const image = withWireReuse(ImageServiceService);
/** What a client decodes from the bytes the server sends for `response`. */
const wire = <T>(method: { responseSerialize(value: unknown): Buffer }, decode: (b: Buffer) => T, response: unknown): T =>
  decode(method.responseSerialize(response));

describe('query RPC caches', () => {
  describe('containers', () => {
    const SANDBOX = 'b'.repeat(64);
    let h: ContainerHarness;
    beforeEach(async () => {
      h = await containerHarness();
      h.sandboxes.add(SANDBOX);
    });
    afterEach(() => h.cleanup());

    const config = (name: string) => ContainerConfig.fromPartial({ metadata: { name, attempt: 0 }, image: { image: IMAGE_NAME }, logPath: `${name}.log` });
    const status = async (id: string) =>
      wire(runtime.containerStatus!, (b) => ContainerStatusResponse.decode(b), await containerStatus(h.service, { containerId: id, verbose: false })).status!;
    const list = async () =>
      wire(runtime.listContainers!, (b) => ListContainersResponse.decode(b), await listContainers(h.service, h.sandboxes, { filter: undefined })).containers;

    it('ContainerStatus shows every state change at once', async () => {
      const r = await h.service.create(SANDBOX, config('app'));
      assert.equal((await status(r.id)).state, ContainerState.CONTAINER_CREATED);
      assert.equal((await status(r.id)).state, ContainerState.CONTAINER_CREATED);
      await h.service.start(r.id);
      const running = await status(r.id);
      assert.equal(running.state, ContainerState.CONTAINER_RUNNING);
      assert.ok(running.startedAt > 0n);
      await h.service.handleExit({ id: r.id, exitCode: 3, finishedAtNs: 1_700_000_000_000_000_000n });
      const exited = await status(r.id);
      assert.equal(exited.state, ContainerState.CONTAINER_EXITED);
      assert.equal(exited.exitCode, 3);
      // verbose answers are built on each call, next to the cached brief one
      const verbose = await containerStatus(h.service, { containerId: r.id, verbose: true });
      assert.equal(verbose.status!.state, ContainerState.CONTAINER_EXITED);
      assert.ok(verbose.info.info);
      assert.equal((await status(r.id)).exitCode, 3);
    });

    it("PodSandboxStatus carries each container's status as it is now, in order, with the timestamp", async () => {
      const pods = await SandboxHarness.create();
      try {
        const pod = await pods.runner.run(PodSandboxConfig.fromPartial({ metadata: { name: 'p', namespace: 'ns', uid: 'uid-p', attempt: 0 } }), '');
        const answer = async () =>
          wire(runtime.podSandboxStatus!, (b) => PodSandboxStatusResponse.decode(b),
            await podSandboxStatus({ pods: pods.pods, sandboxes: pods.service, containersOf: () => h.service.ofSandbox(SANDBOX) }, { podSandboxId: pod.id, verbose: false }));
        const a = await h.service.create(SANDBOX, config('a'));
        const b = await h.service.create(SANDBOX, config('b'));
        const first = await answer();
        assert.equal(first.status!.id, pod.id);
        assert.deepEqual(first.containersStatuses.map((c) => [c.id, c.state]), [[a.id, ContainerState.CONTAINER_CREATED], [b.id, ContainerState.CONTAINER_CREATED]]);
        assert.ok(first.timestamp > 0n);
        await h.service.start(b.id);
        const second = await answer();
        assert.deepEqual(second.containersStatuses.map((c) => c.state), [ContainerState.CONTAINER_CREATED, ContainerState.CONTAINER_RUNNING]);
        assert.deepEqual(second.containersStatuses[1], (await status(b.id)));
        assert.ok(second.timestamp >= first.timestamp);
        await h.service.remove(a.id);
        assert.deepEqual((await answer()).containersStatuses.map((c) => c.id), [b.id]);
      } finally {
        await pods.cleanup();
      }
    });

    it('ListContainers shows creates, state changes and removals at once, in creation order', async () => {
      const a = await h.service.create(SANDBOX, config('a'));
      assert.deepEqual((await list()).map((c) => c.id), [a.id]);
      const b = await h.service.create(SANDBOX, config('b'));
      assert.deepEqual((await list()).map((c) => [c.id, c.state]), [[a.id, ContainerState.CONTAINER_CREATED], [b.id, ContainerState.CONTAINER_CREATED]]);
      await h.service.start(b.id);
      assert.deepEqual((await list()).map((c) => c.state), [ContainerState.CONTAINER_CREATED, ContainerState.CONTAINER_RUNNING]);
      await h.service.remove(a.id);
      const after = await list();
      assert.deepEqual(after.map((c) => c.id), [b.id]);
      assert.equal(after[0]!.metadata!.name, 'b');
      assert.deepEqual(after, ListContainersResponse.fromPartial(await listContainers(h.service, h.sandboxes, { filter: undefined })).containers);
    });
  });

  describe('pods', () => {
    let h: SandboxHarness;
    beforeEach(async () => {
      h = await SandboxHarness.create();
    });
    afterEach(() => h.cleanup());

    const pod = (name: string) => PodSandboxConfig.fromPartial({ metadata: { name, namespace: 'ns', uid: `uid-${name}`, attempt: 0 }, labels: { app: name } });
    const status = async (id: string) =>
      wire(runtime.podSandboxStatus!, (b) => PodSandboxStatusResponse.decode(b), await podSandboxStatus({ pods: h.pods, sandboxes: h.service, containersOf: () => [] }, { podSandboxId: id, verbose: false }));
    const list = async () => wire(runtime.listPodSandbox!, (b) => ListPodSandboxResponse.decode(b), await listPodSandbox(h.service, { filter: undefined })).items;

    it('PodSandboxStatus shows a stop at once, with a fresh timestamp on every answer', async () => {
      const r = await h.runner.run(pod('web'), '');
      const first = await status(r.id);
      assert.equal(first.status!.state, PodSandboxState.SANDBOX_READY);
      assert.deepEqual(first.status!.network!.ip, '10.9.0.2');
      const second = await status(r.id);
      assert.ok(second.timestamp >= first.timestamp && second.timestamp > 0n);
      await h.service.stop(r.id);
      const stopped = await status(r.id);
      assert.equal(stopped.status!.state, PodSandboxState.SANDBOX_NOTREADY);
      assert.equal(stopped.status!.network!.ip, '');
      assert.ok(stopped.timestamp >= second.timestamp);
      const verbose = await podSandboxStatus({ pods: h.pods, sandboxes: h.service, containersOf: () => [] }, { podSandboxId: r.id, verbose: true });
      assert.ok(verbose.info.info);
      assert.equal(verbose.status!.state, PodSandboxState.SANDBOX_NOTREADY);
    });

    it('ListPodSandbox shows runs, stops and removals at once, and filters by label', async () => {
      const a = await h.runner.run(pod('a'), '');
      const b = await h.runner.run(pod('b'), '');
      assert.deepEqual((await list()).map((p) => [p.id, p.state]), [[a.id, PodSandboxState.SANDBOX_READY], [b.id, PodSandboxState.SANDBOX_READY]]);
      await h.service.stop(a.id);
      assert.deepEqual((await list()).map((p) => p.state), [PodSandboxState.SANDBOX_NOTREADY, PodSandboxState.SANDBOX_READY]);
      const byLabel = await listPodSandbox(h.service, { filter: PodSandboxFilter.fromPartial({ labelSelector: { app: 'b' } }) });
      assert.deepEqual(wire(runtime.listPodSandbox!, (x) => ListPodSandboxResponse.decode(x), byLabel).items.map((p) => p.id), [b.id]);
      await h.service.remove(a.id);
      assert.deepEqual((await list()).map((p) => p.id), [b.id]);
    });
  });

  describe('images', () => {
    const record = (id: string, tags: string[]): ImageRecord => ({
      id,
      repoTags: tags,
      repoDigests: [],
      manifestDigest: 'sha256:' + 'm'.repeat(64),
      blobs: [],
      layers: [],
      size: 100,
      config: { config: { User: '1000' } } as ImageRecord['config'],
      pinned: false,
      pulledAt: '2026-12-01T00:00:00Z',
    });
    /** An image store whose records are replaced on every change, as the real one does. */
    class FakeImages implements ImageQueries {
      records: ImageRecord[] = [];
      pinned = new PinnedImages([]);
      list() {
        return [...this.records];
      }
      find(spec: string) {
        return this.records.find((r) => r.id === spec || r.repoTags.includes(spec));
      }
      isPinned(r: ImageRecord) {
        return this.pinned.matches(r);
      }
    }
    /** The fake as the only store, the shared one. */
    const catalog = (images: FakeImages) => ({ forHandler: () => ({ runtimeHandler: '', service: images }), stores: () => [{ runtimeHandler: '', service: images }] });
    const A = 'sha256:' + 'a'.repeat(64);
    const B = 'sha256:' + 'b'.repeat(64);
    const status = async (images: FakeImages, spec: string) =>
      wire(image.imageStatus!, (b) => ImageStatusResponse.decode(b), await imageStatus(catalog(images), ImageStatusRequest.fromPartial({ image: { image: spec } }))).image;
    const list = async (images: FakeImages) => wire(image.listImages!, (b) => ListImagesResponse.decode(b), await listImages(catalog(images), { filter: undefined })).images;

    it('ImageStatus shows a new tag, a change of pinned patterns and a removal at once', async () => {
      const images = new FakeImages();
      images.records = [record(A, ['registry.test/app:1'])];
      assert.deepEqual((await status(images, A))!.repoTags, ['registry.test/app:1']);
      assert.equal((await status(images, A))!.pinned, false);
      images.records = [{ ...images.records[0]!, repoTags: ['registry.test/app:1', 'registry.test/app:2'] }];
      assert.deepEqual((await status(images, A))!.repoTags, ['registry.test/app:1', 'registry.test/app:2']);
      images.pinned = new PinnedImages(['registry.test/app:*']);
      assert.equal((await status(images, A))!.pinned, true);
      images.pinned = new PinnedImages([]);
      assert.equal((await status(images, A))!.pinned, false);
      images.records = [];
      assert.equal(await status(images, A), undefined);
    });

    it('ListImages shows pulls, removals and pinned changes at once', async () => {
      const images = new FakeImages();
      assert.deepEqual(await list(images), []);
      images.records = [record(A, ['registry.test/a:1'])];
      assert.deepEqual((await list(images)).map((i) => i.id), [A]);
      images.records = [...images.records, record(B, ['registry.test/b:1'])];
      assert.deepEqual((await list(images)).map((i) => [i.id, i.pinned]), [[A, false], [B, false]]);
      images.pinned = new PinnedImages(['registry.test/b:1']);
      assert.deepEqual((await list(images)).map((i) => [i.id, i.pinned]), [[A, false], [B, true]]);
      images.records = images.records.slice(1);
      const left = await list(images);
      assert.deepEqual(left.map((i) => i.id), [B]);
      assert.equal(left[0]!.uid!.value, 1000n);
    });
  });
});
