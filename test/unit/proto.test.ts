import assert from 'node:assert/strict';
import {
  ContainerStatus,
  ImageServiceService,
  RuntimeServiceService,
  ContainerStatusResponse,
  ContainerConfig,
  CpuUsage,
  Signal,
  UpdatePodSandboxResourcesRequest,
} from '../../src/gen/runtime/v1/api.js';
import { implement } from '../../src/api/services.js';
import { silentLogger } from '../../src/common/logger.js';
import { NO_TELEMETRY } from '../../src/observability/hooks.js';

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

  it('keeps uint64 PSI totals and pod-level limits above 2^53 exact', () => {
    const big = 18_000_000_000_000_000_001n;
    const cpu = CpuUsage.decode(CpuUsage.encode(CpuUsage.fromPartial({ psi: { Full: { Total: big, Avg10: 1.25 } } })).finish());
    assert.equal(cpu.psi!.Full!.Total, big);
    assert.equal(cpu.psi!.Full!.Avg10, 1.25);
    assert.equal(cpu.psi!.Some, undefined);
    const quota = 9_007_199_254_740_993n;
    const req = UpdatePodSandboxResourcesRequest.fromPartial({ podSandboxId: 'p', resources: { cpuQuota: quota, memoryLimitInBytes: -1n } });
    const back = UpdatePodSandboxResourcesRequest.decode(UpdatePodSandboxResourcesRequest.encode(req).finish());
    assert.equal(back.resources!.cpuQuota, quota);
    assert.equal(back.resources!.memoryLimitInBytes, -1n);
  });

  it('encodes the stop signal as field 18 with the enum numbering of cri-api', () => {
    const bytes = ContainerConfig.encode(ContainerConfig.fromPartial({ stopSignal: Signal.SIGUSR1 })).finish();
    // tag (18 << 3 | varint) = 144 = 0x90 0x01, value 29
    assert.deepEqual([...bytes], [0x90, 0x01, 29]);
    assert.equal(Signal.SIGTERM, 23);
    assert.equal(Signal.SIGRTMAX, 65);
  });

  it('defines every CRI v1 RPC of Kubernetes 1.36', () => {
    const runtime: string[] = Object.values(RuntimeServiceService).map((m) => m.path);
    const image: string[] = Object.values(ImageServiceService).map((m) => m.path);
    assert.equal(runtime.length, 35);
    assert.equal(image.length, 6);
    for (const rpc of [
      'GetContainerEvents', 'RuntimeConfig', 'UpdatePodSandboxResources', 'StreamPodSandboxes', 'StreamContainers',
      'StreamContainerStats', 'StreamPodSandboxStats', 'StreamPodSandboxMetrics',
    ]) {
      assert.ok(runtime.includes(`/runtime.v1.RuntimeService/${rpc}`), rpc);
    }
    assert.ok(image.includes('/runtime.v1.ImageService/ImageFsInfo'));
    assert.ok(image.includes('/runtime.v1.ImageService/StreamImages'));
    const streaming = Object.values(RuntimeServiceService).filter((m) => m.responseStream).length;
    assert.equal(streaming, 6);
  });

  it('registers a handler for every RPC, even without an implementation', () => {
    const impl = implement(RuntimeServiceService, {}, silentLogger, NO_TELEMETRY);
    assert.deepEqual(Object.keys(impl).sort(), Object.keys(RuntimeServiceService).sort());
    const images = implement(ImageServiceService, {}, silentLogger, NO_TELEMETRY);
    assert.deepEqual(Object.keys(images).sort(), Object.keys(ImageServiceService).sort());
  });
});
