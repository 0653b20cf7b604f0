/**
 * RunPodSandbox's adapter (src/cri/run-pod-sandbox.ts): what it refuses before any work, and its answer.
 * The pod itself is run by pod/lifecycle.ts (PodLifecycle.run); the real thing is driven by
 * test/integration/sandbox/sandbox.test.ts.
 */
import assert from 'node:assert/strict';
import { RunPodSandboxRequest } from '../../../src/gen/runtime/v1/api.js';
import { runPodSandbox } from '../../../src/cri/run-pod-sandbox.js';
import { isKind } from '../../../src/common/errors.js';
import type { PodLifecycle } from '../../../src/pod/lifecycle.js';
import type { SandboxRecord } from '../../../src/sandbox/model.js';

function fakePods(calls: unknown[][]): PodLifecycle {
  return {
    run: (config: unknown, handler: string) => {
      calls.push([config, handler]);
      return Promise.resolve({ id: 'f'.repeat(64) } as SandboxRecord);
    },
  } as unknown as PodLifecycle;
}

describe('cri: RunPodSandbox', () => {
  it('runs the pod with its config and runtime handler and answers its ID', async () => {
    const calls: unknown[][] = [];
    const req = RunPodSandboxRequest.fromPartial({ config: { metadata: { name: 'web', namespace: 'ns', uid: 'u' } }, runtimeHandler: 'crun' });
    const res = await runPodSandbox(fakePods(calls), req);
    assert.equal(res.podSandboxId, 'f'.repeat(64));
    assert.equal(calls.length, 1);
    assert.equal((calls[0]![0] as { metadata: { name: string } }).metadata.name, 'web');
    assert.equal(calls[0]![1], 'crun');
  });

  it('refuses a request without a config, with INVALID_ARGUMENT, and runs nothing', async () => {
    const calls: unknown[][] = [];
    await assert.rejects(runPodSandbox(fakePods(calls), RunPodSandboxRequest.fromPartial({})), (err: unknown) => isKind(err, 'InvalidArgument') && /config/.test((err as Error).message));
    assert.equal(calls.length, 0);
  });

  it('refuses impossible overhead and resources before running anything', async () => {
    const calls: unknown[][] = [];
    for (const linux of [{ overhead: { cpuShares: -1n } }, { resources: { memoryLimitInBytes: -5n } }]) {
      const req = RunPodSandboxRequest.fromPartial({ config: { metadata: { name: 'web' }, linux } });
      await assert.rejects(runPodSandbox(fakePods(calls), req), (err: unknown) => isKind(err, 'InvalidArgument'));
    }
    assert.equal(calls.length, 0);
  });
});
