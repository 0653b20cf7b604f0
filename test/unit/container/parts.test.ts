/** Pure parts of the container module: event fan-out, resource merging, output capping, filters, stats sums. */
import assert from 'node:assert/strict';
import { ContainerConfig, ContainerState, LinuxContainerResources, PodSandboxConfig } from '../../../src/gen/runtime/v1/api.js';
import { silentLogger } from '../../../src/common/logger.js';
import { EventHub } from '../../../src/pod/event-hub.js';
import { mergeResources } from '../../../src/container/resources.js';
import { capOutput } from '../../../src/container/service.js';
import { sumStats } from '../../../src/stats/stats.js';
import { containerName, type ContainerRecord } from '../../../src/container/model.js';
import { logPathFor } from '../../../src/container/log-file.js';
import { filterContainers } from '../../../src/cri/list-containers.js';
import { EXEC_SYNC_MAX_OUTPUT } from '../../../src/monitor/exec-sync.js';

/** A sink whose transport accepts `capacity` writes, then refuses until drained. */
function sink(capacity = Infinity) {
  const got: number[] = [];
  let buffered = 0;
  return {
    got,
    closed: false,
    write(n: number) {
      got.push(n);
      buffered++;
      return buffered <= capacity;
    },
    drain() {
      buffered = 0;
    },
    end() {
      this.closed = true;
    },
    onClose() {},
  };
}

describe('container parts', () => {
  it('EventHub delivers in order to every subscriber and drops one that stays behind', () => {
    const hub = new EventHub<number>({ maxBacklog: 5, log: silentLogger });
    const fast = sink();
    const slow = sink(2);
    const recovering = sink(2);
    hub.subscribe(fast);
    hub.subscribe(slow);
    hub.subscribe(recovering);
    for (let i = 0; i < 6; i++) hub.publish(i);
    recovering.drain();
    for (let i = 6; i < 12; i++) hub.publish(i);
    assert.deepEqual(fast.got, [...Array(12).keys()]);
    assert.equal(slow.closed, true, 'refused more than 5 times in a row');
    assert.ok(slow.got.length < 12);
    assert.equal(recovering.closed, false, 'drained in time');
    assert.equal(hub.size, 2);
  });

  it('merges resource updates: set fields replace, zero fields keep, unified entries merge', () => {
    const current = LinuxContainerResources.fromPartial({ cpuShares: 512n, memoryLimitInBytes: 100n, unified: { 'memory.high': '50' } });
    const merged = mergeResources(current, LinuxContainerResources.fromPartial({ memoryLimitInBytes: 200n, cpusetCpus: '0', unified: { 'cpu.weight': '10' } }));
    assert.equal(merged.cpuShares, 512n);
    assert.equal(merged.memoryLimitInBytes, 200n);
    assert.equal(merged.cpusetCpus, '0');
    assert.deepEqual(merged.unified, { 'memory.high': '50', 'cpu.weight': '10' });
    assert.deepEqual(mergeResources(undefined, undefined), LinuxContainerResources.fromPartial({}));
  });

  it('caps ExecSync output below the limit and says so on stderr', () => {
    const out = capOutput(Buffer.alloc(EXEC_SYNC_MAX_OUTPUT, 'a'), Buffer.from('err'));
    assert.ok(out.stdout.length + out.stderr.length <= EXEC_SYNC_MAX_OUTPUT);
    assert.match(out.stderr.toString(), /output truncated/);
    const small = capOutput(Buffer.from('x'), Buffer.from('err'));
    assert.equal(small.stdout.toString(), 'x');
    assert.match(small.stderr.toString(), /^err\n\[stove: output truncated/);
  });

  it('names containers like containerd and joins log paths', () => {
    assert.equal(containerName({ name: 'app', attempt: 2 }, { name: 'web', namespace: 'ns', uid: 'u1' }), 'app_web_ns_u1_2');
    const pod = PodSandboxConfig.fromPartial({ logDirectory: '/var/log/pods/p' });
    assert.equal(logPathFor(pod, ContainerConfig.fromPartial({ logPath: 'app/0.log' })), '/var/log/pods/p/app/0.log');
    assert.equal(logPathFor(pod, ContainerConfig.fromPartial({})), '');
    assert.throws(() => logPathFor(PodSandboxConfig.fromPartial({}), ContainerConfig.fromPartial({ logPath: 'x.log' })), /no log_directory/);
  });

  it('filters containers by ID prefix, pod prefix, state and labels', () => {
    const record = (id: string, sandboxId: string, state: ContainerRecord['state'], labels: Record<string, string>, createdAt: bigint) =>
      ({ id, sandboxId, state, createdAt, config: ContainerConfig.toJSON(ContainerConfig.fromPartial({ labels })) }) as ContainerRecord;
    const records = [record('aa11', 'p1', 'running', { app: 'a' }, 2n), record('aa22', 'p2', 'exited', { app: 'b' }, 1n), record('bb33', 'p1', 'created', {}, 3n)];
    const containers = { list: () => records, find: (p: string) => records.filter((r) => r.id.startsWith(p)).at(0) };
    const sandboxes = { find: (p: string) => (['p1', 'p2'].includes(p) ? ({ id: p } as never) : undefined), list: () => [] };
    const ids = (f: object) => filterContainers(containers, sandboxes, f).map((r) => r.id);
    assert.deepEqual(ids({}), ['aa22', 'aa11', 'bb33'], 'oldest first');
    assert.deepEqual(ids({ id: 'bb' }), ['bb33']);
    assert.deepEqual(ids({ id: 'zz' }), []);
    assert.deepEqual(ids({ podSandboxId: 'p1' }), ['aa11', 'bb33']);
    assert.deepEqual(ids({ state: { state: ContainerState.CONTAINER_EXITED } }), ['aa22']);
    assert.deepEqual(ids({ labelSelector: { app: 'a' } }), ['aa11']);
  });

  it('sums cgroup stats for a pod', () => {
    const total = sumStats([
      { cpu: { usageNs: 10n }, memory: { usageBytes: 5n, workingSetBytes: 4n, rssBytes: 3n, pageFaults: 2n, majorPageFaults: 1n, limitBytes: 9n }, pids: { current: 1n } },
      undefined,
      { cpu: { usageNs: 5n }, pids: { current: 2n, limit: 10n } },
    ]);
    assert.deepEqual(total, {
      cpu: { usageNs: 15n },
      memory: { usageBytes: 5n, workingSetBytes: 4n, rssBytes: 3n, pageFaults: 2n, majorPageFaults: 1n },
      pids: { current: 3n },
    });
    assert.equal(sumStats([undefined]), undefined);
  });
});
