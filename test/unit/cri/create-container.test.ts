/**
 * CreateContainer's adapter (src/cri/create-container.ts): what it refuses before any work, and its
 * answer. The container is created by pod/lifecycle.ts (PodLifecycle.createContainer, under the pod's
 * lock) and container/service.ts; env values as bytes: create-container-env.test.ts; the real thing:
 * test/integration/container/lifecycle.test.ts.
 */
import assert from 'node:assert/strict';
import { CreateContainerRequest } from '../../../src/gen/runtime/v1/api.js';
import { createContainer } from '../../../src/cri/create-container.js';
import { isKind } from '../../../src/common/errors.js';
import type { ContainerRecord } from '../../../src/container/model.js';

const ID = 'c'.repeat(64);

function fakePods(calls: unknown[][]) {
  return {
    createContainer: (podId: string, config: unknown, podConfig: unknown) => {
      calls.push([podId, config, podConfig]);
      return Promise.resolve({ id: ID } as ContainerRecord);
    },
  };
}

const ok = { podSandboxId: 'p1', config: { metadata: { name: 'web' }, image: { image: 'busybox' } }, sandboxConfig: { metadata: { name: 'pod' } } };

async function create(partial: object, calls: unknown[][] = []) {
  const req = CreateContainerRequest.fromPartial(partial);
  return createContainer(fakePods(calls), req, Buffer.from(CreateContainerRequest.encode(req).finish()));
}

describe('cri: CreateContainer', () => {
  it('creates the container in the pod and answers its ID', async () => {
    const calls: unknown[][] = [];
    const res = await create(ok, calls);
    assert.equal(res.containerId, ID);
    assert.equal(calls[0]![0], 'p1');
    assert.equal((calls[0]![1] as { metadata: { name: string } }).metadata.name, 'web');
    assert.equal((calls[0]![2] as { metadata: { name: string } }).metadata.name, 'pod');
  });

  const refused: [string, object, RegExp][] = [
    ['no pod ID', { ...ok, podSandboxId: '' }, /pod_sandbox_id/],
    ['no config', { podSandboxId: 'p1' }, /config/],
    ['no metadata', { ...ok, config: { image: { image: 'busybox' } } }, /config\.metadata/],
    ['no name', { ...ok, config: { metadata: {}, image: { image: 'busybox' } } }, /config\.metadata\.name/],
    ['no image', { ...ok, config: { metadata: { name: 'web' } } }, /config\.image\.image/],
    ['negative resources', { ...ok, config: { ...ok.config, linux: { resources: { memoryLimitInBytes: -5n } } } }, /./],
    ['a malformed CDI device name', { ...ok, config: { ...ok.config, CDIDevices: [{ name: 'no-kind' }] } }, /./],
  ];
  for (const [what, partial, message] of refused) {
    it(`refuses ${what} with INVALID_ARGUMENT and creates nothing`, async () => {
      const calls: unknown[][] = [];
      await assert.rejects(create(partial, calls), (err: unknown) => isKind(err, 'InvalidArgument') && message.test((err as Error).message));
      assert.equal(calls.length, 0);
    });
  }
});
