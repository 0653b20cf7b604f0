/**
 * ExecSync's adapter (src/cri/exec-sync.ts): what it refuses before any work, and its answer. The
 * command runs through container/service.ts (ContainerService.execSync: state check, output cap) and
 * monitor/exec-sync.ts (runc exec under conmon); the real thing: test/integration/monitor/exec-attach.test.ts
 * and test/integration/container/runtime.test.ts.
 */
import assert from 'node:assert/strict';
import { ExecSyncRequest } from '../../../src/gen/runtime/v1/api.js';
import { execSync } from '../../../src/cri/exec-sync.js';
import { isKind } from '../../../src/common/errors.js';
import type { ContainerService } from '../../../src/container/service.js';

function fakeContainers(calls: unknown[][]): ContainerService {
  return {
    execSync: (...args: unknown[]) => {
      calls.push(args);
      return Promise.resolve({ stdout: Buffer.from('out'), stderr: Buffer.from('err'), exitCode: 3 });
    },
  } as unknown as ContainerService;
}

describe('cri: ExecSync', () => {
  it('runs the command with its timeout and signal and answers stdout, stderr and the exit code', async () => {
    const calls: unknown[][] = [];
    const signal = new AbortController().signal;
    const res = await execSync(fakeContainers(calls), ExecSyncRequest.fromPartial({ containerId: 'c1', cmd: ['sh', '-c', 'exit 3'], timeout: 5n }), signal);
    assert.deepEqual(calls[0], ['c1', ['sh', '-c', 'exit 3'], 5, signal]);
    assert.equal(Buffer.from(res.stdout).toString(), 'out');
    assert.equal(Buffer.from(res.stderr).toString(), 'err');
    assert.equal(res.exitCode, 3);
  });

  const refused: [string, object, RegExp][] = [
    ['no container ID', { cmd: ['true'] }, /container_id/],
    ['no command', { containerId: 'c1' }, /cmd is required/],
    ['an empty program', { containerId: 'c1', cmd: [''] }, /cmd is required/],
    ['a negative timeout', { containerId: 'c1', cmd: ['true'], timeout: -1n }, /timeout -1/],
  ];
  for (const [what, partial, message] of refused) {
    it(`refuses ${what} with INVALID_ARGUMENT and runs nothing`, async () => {
      const calls: unknown[][] = [];
      await assert.rejects(execSync(fakeContainers(calls), ExecSyncRequest.fromPartial(partial)), (err: unknown) => isKind(err, 'InvalidArgument') && message.test((err as Error).message));
      assert.equal(calls.length, 0);
    });
  }
});
