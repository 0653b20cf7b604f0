import assert from 'node:assert/strict';
import {
  ContainerStatus,
  ImageServiceService,
  RuntimeServiceService,
  ContainerStatusResponse,
} from '../../src/gen/runtime/v1/api.js';
import { implement } from '../../src/api/services.js';
import { silentLogger } from '../../src/common/logger.js';

describe('proto', () => {
  it('keeps int64 values above 2^53 exact through encode and decode', () => {
    const big = 1_700_000_000_123_456_789n;
    assert.ok(big > BigInt(Number.MAX_SAFE_INTEGER));
    const msg = ContainerStatusResponse.fromPartial({
      status: ContainerStatus.fromPartial({ id: 'x', createdAt: big, finishedAt: -big, exitCode: 3 }),
    });
    const decoded = ContainerStatusResponse.decode(ContainerStatusResponse.encode(msg).finish());
    assert.equal(decoded.status!.createdAt, big);
    assert.equal(decoded.status!.finishedAt, -big);
    assert.equal(typeof decoded.status!.startedAt, 'bigint');
  });

  it('defines every CRI v1 RPC of Kubernetes 1.32', () => {
    const runtime = Object.values(RuntimeServiceService).map((m) => m.path);
    const image = Object.values(ImageServiceService).map((m) => m.path);
    assert.equal(runtime.length, 29);
    assert.equal(image.length, 5);
    assert.ok(runtime.includes('/runtime.v1.RuntimeService/GetContainerEvents'));
    assert.ok(runtime.includes('/runtime.v1.RuntimeService/RuntimeConfig'));
    assert.ok(image.includes('/runtime.v1.ImageService/ImageFsInfo'));
  });

  it('registers a handler for every RPC, even without an implementation', () => {
    const impl = implement(RuntimeServiceService, {}, silentLogger);
    assert.deepEqual(Object.keys(impl).sort(), Object.keys(RuntimeServiceService).sort());
    const images = implement(ImageServiceService, {}, silentLogger);
    assert.deepEqual(Object.keys(images).sort(), Object.keys(ImageServiceService).sort());
  });
});
