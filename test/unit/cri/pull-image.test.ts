/**
 * PullImage's adapter (src/cri/pull-image.ts): the image store it pulls into, what it passes on, and its
 * answer. The pull itself is images/image-service.ts (ImageService.pull, then images/pull.ts); the real
 * thing against a registry: test/integration/images/pull.test.ts.
 */
import assert from 'node:assert/strict';
import { PullImageRequest } from '../../../src/gen/runtime/v1/api.js';
import { pullImage } from '../../../src/cri/pull-image.js';
import { invalidArgument, isKind } from '../../../src/common/errors.js';
import type { ImageRecord } from '../../../src/images/image-store.js';
import type { HandlerStore } from '../../../src/images/image-stores.js';

const RECORD = { id: `sha256:${'a'.repeat(64)}`, repoTags: ['registry.example/app:1'], repoDigests: [], layers: [], blobs: [], size: 1, config: {}, pinned: false } as unknown as ImageRecord;

function fakeImages(calls: unknown[][]) {
  return {
    forHandler(handler: string): HandlerStore {
      if (handler === 'unknown') throw invalidArgument('runtime handler "unknown" is not configured');
      const service = {
        pull: (...args: unknown[]) => {
          calls.push([handler, ...args]);
          return Promise.resolve(RECORD);
        },
        isPinned: () => false,
      };
      return { runtimeHandler: '', service } as unknown as HandlerStore;
    },
  };
}

describe('cri: PullImage', () => {
  it('pulls with the credentials and the pod namespace and answers the image ID', async () => {
    const calls: unknown[][] = [];
    const signal = new AbortController().signal;
    const req = PullImageRequest.fromPartial({
      image: { image: 'registry.example/app:1' },
      auth: { username: 'u', password: 'p' },
      sandboxConfig: { metadata: { name: 'pod', namespace: 'team' } },
    });
    const res = await pullImage(fakeImages(calls), req, signal);
    assert.equal(res.imageRef, RECORD.id);
    const [handler, image, auth, namespace, passedSignal] = calls[0]!;
    assert.equal(handler, '');
    assert.equal(image, 'registry.example/app:1');
    assert.equal((auth as { username: string }).username, 'u');
    assert.equal(namespace, 'team');
    assert.equal(passedSignal, signal);
  });

  it("pulls into the runtime handler's store", async () => {
    const calls: unknown[][] = [];
    await pullImage(fakeImages(calls), PullImageRequest.fromPartial({ image: { image: 'x', runtimeHandler: 'kata' } }));
    assert.equal(calls[0]![0], 'kata');
  });

  it('refuses a request without an image, and an unknown runtime handler, with INVALID_ARGUMENT', async () => {
    const calls: unknown[][] = [];
    await assert.rejects(pullImage(fakeImages(calls), PullImageRequest.fromPartial({})), (err: unknown) => isKind(err, 'InvalidArgument') && /image\.image/.test((err as Error).message));
    await assert.rejects(pullImage(fakeImages(calls), PullImageRequest.fromPartial({ image: { image: 'x', runtimeHandler: 'unknown' } })), (err: unknown) => isKind(err, 'InvalidArgument'));
    assert.equal(calls.length, 0);
  });
});
