/**
 * Resource values the kernel would misread are refused: every numeric field of CRI
 * LinuxContainerResources is range-checked (0 = unset) with INVALID_ARGUMENT naming the field — by the
 * shared validator, and end to end in CreateContainer, UpdateContainerResources and RunPodSandbox of a real daemon
 * (where `cpu_quota: -5` used to succeed).
 */
import assert from 'node:assert/strict';
import { LinuxContainerResources, ListContainersRequest, ListPodSandboxRequest, UpdateContainerResourcesRequest, type DeepPartial } from '../../src/gen/runtime/v1/api.js';
import { validateLinuxResources } from '../../src/cri/validate-resources.js';
import { isKind } from '../../src/common/errors.js';
import { ContainerWorld, containerSuite, rejectsWith } from '../integration/container/world.js';

const resources = (r: DeepPartial<LinuxContainerResources>) => LinuxContainerResources.fromPartial(r);

/** The message of the INVALID_ARGUMENT the validator throws for `r`. */
function refusal(r: DeepPartial<LinuxContainerResources>): string {
  try {
    validateLinuxResources(resources(r), 'linux');
  } catch (err) {
    assert.ok(isKind(err, 'InvalidArgument'), `not INVALID_ARGUMENT: ${String(err)}`);
    return (err as Error).message;
  }
  throw new Error(`${JSON.stringify(LinuxContainerResources.toJSON(resources(r)))} was accepted`);
}

describe('security: out-of-range resources are refused', () => {
  it('accepts unset fields and what the kubelet sends', () => {
    validateLinuxResources(resources({}), 'linux');
    validateLinuxResources(
      resources({
        cpuPeriod: 100_000n,
        cpuQuota: 50_000n,
        cpuShares: 512n,
        memoryLimitInBytes: 64n << 20n,
        memorySwapLimitInBytes: 64n << 20n,
        oomScoreAdj: -997n,
        cpusetCpus: '0-1,3',
        cpusetMems: '0',
        hugepageLimits: [{ pageSize: '2MB', limit: 0n }],
        unified: { 'memory.high': '1000000' },
      }),
      'linux',
    );
    validateLinuxResources(resources({ cpuQuota: -1n, memorySwapLimitInBytes: -1n, cpuShares: 2n }), 'linux');
  });

  it("accepts the kubelet's \"no limit\" in every field of every resize RPC (cgroup v1 and v2)", () => {
    const v1 = 9223372036854771712n; // an unlimited v1 memory.limit_in_bytes, as the kubelet reads it back
    const overhead = 64n << 20n;
    // UpdatePodSandboxResources: what the kubelet read from the pod cgroup, less the overhead.
    for (const r of [
      { memoryLimitInBytes: v1, cpuQuota: -1n, cpuPeriod: 100_000n, cpuShares: 2n },
      { memoryLimitInBytes: v1 - overhead, cpuQuota: -1n - 25_000n, cpuPeriod: 100_000n, cpuShares: 2n },
      { memoryLimitInBytes: -1n, cpuQuota: -1n, cpuPeriod: 100_000n, cpuShares: 262_144n },
      { memoryLimitInBytes: -1n - overhead, cpuQuota: -1n - 25_000n, cpuPeriod: 100_000n, cpuShares: 2n },
      { memoryLimitInBytes: (1n << 63n) - 1n, memorySwapLimitInBytes: -1n, hugepageLimits: [{ pageSize: '2MB', limit: (1n << 64n) - 1n }], unified: { 'memory.max': 'max', 'memory.swap.max': 'max' } },
    ]) {
      validateLinuxResources(resources(r), 'resources', { podLevel: true });
    }
    // UpdateContainerResources and CreateContainer: 0 (unset) or -1.
    validateLinuxResources(resources({ memoryLimitInBytes: v1, memorySwapLimitInBytes: v1, cpuQuota: -1n, hugepageLimits: [{ pageSize: '2MB', limit: v1 }] }), 'linux');
    validateLinuxResources(resources({ memoryLimitInBytes: -1n, memorySwapLimitInBytes: -1n, cpuQuota: -1n }), 'linux');
    // Only the pod level takes the kubelet's "(no limit) less overhead" negatives; a container does not.
    assert.match(refusal({ memoryLimitInBytes: -1n - overhead }), /linux\.memory_limit_in_bytes -67108865 is out of range/);
    assert.match(refusal({ cpuQuota: -25_001n }), /linux\.cpu_quota -25001 is out of range/);
  });

  it('names the field of every value the kernel would misread', () => {
    const cases: [DeepPartial<LinuxContainerResources>, RegExp][] = [
      [{ cpuQuota: -5n }, /^linux\.cpu_quota -5 is out of range/],
      [{ cpuQuota: 999n }, /linux\.cpu_quota 999/],
      [{ cpuPeriod: -1n }, /linux\.cpu_period -1/],
      [{ cpuPeriod: 2_000_000n }, /linux\.cpu_period 2000000/],
      [{ cpuShares: 1n }, /linux\.cpu_shares 1 /],
      [{ cpuShares: -2n }, /linux\.cpu_shares -2/],
      [{ cpuShares: 1n << 40n }, /linux\.cpu_shares/],
      [{ memoryLimitInBytes: -2n }, /linux\.memory_limit_in_bytes -2/],
      [{ memoryLimitInBytes: 1n << 63n }, /linux\.memory_limit_in_bytes 9223372036854775808 is out of range/],
      [{ memorySwapLimitInBytes: 1n << 63n }, /linux\.memory_swap_limit_in_bytes/],
      [{ memorySwapLimitInBytes: -2n }, /linux\.memory_swap_limit_in_bytes -2/],
      [{ memoryLimitInBytes: 100n << 20n, memorySwapLimitInBytes: 50n << 20n }, /linux\.memory_swap_limit_in_bytes .* is below linux\.memory_limit_in_bytes/],
      [{ oomScoreAdj: 1001n }, /linux\.oom_score_adj 1001/],
      [{ oomScoreAdj: -1001n }, /linux\.oom_score_adj -1001/],
      [{ cpusetCpus: '0-' }, /linux\.cpuset_cpus "0-"/],
      [{ cpusetCpus: '3-1' }, /linux\.cpuset_cpus "3-1": range 3-1 is reversed/],
      [{ cpusetMems: '0\n1' }, /linux\.cpuset_mems/],
      [{ hugepageLimits: [{ pageSize: '2MB', limit: 1n << 64n }] }, /linux\.hugepage_limits\[0\]\.limit/],
      [{ hugepageLimits: [{ pageSize: '../2MB', limit: 1n }] }, /linux\.hugepage_limits\[0\]\.page_size/],
      [{ unified: { '../../cgroup.procs': '1' } }, /linux\.unified key "\.\.\/\.\.\/cgroup\.procs"/],
      [{ unified: { 'memory.max': '1\n2' } }, /linux\.unified\["memory\.max"\]/],
    ];
    for (const [r, re] of cases) assert.match(refusal(r), re);
  });
});

describe('security: out-of-range resources are refused by a real daemon', function () {
  this.timeout(60_000);
  const world = new ContainerWorld();
  let pod: Awaited<ReturnType<ContainerWorld['pod']>>;
  containerSuite(world, 'resource range tests', {
    scope: 'containers',
    setup: async () => {
      pod = await world.pod();
    },
  });

  it('UpdateContainerResources with cpu_quota -5 is INVALID_ARGUMENT and changes nothing', async () => {
    const id = await world.run(pod, world.config('sleeper', { linux: { resources: { cpuPeriod: 100_000n, cpuQuota: 50_000n } } }));
    await rejectsWith(
      world.daemon.clients.runtime.updateContainerResources(UpdateContainerResourcesRequest.fromPartial({ containerId: id, linux: { cpuQuota: -5n } })),
      'INVALID_ARGUMENT',
      /linux\.cpu_quota -5 is out of range/,
    );
    const status = await world.status(id);
    assert.equal(status.status?.resources?.linux?.cpuQuota, 50_000n);
  });

  it('CreateContainer with an out-of-range field is INVALID_ARGUMENT naming it, and leaves nothing', async () => {
    await rejectsWith(
      world.create(pod, world.config('sleeper', { linux: { resources: { oomScoreAdj: 5000n } } })),
      'INVALID_ARGUMENT',
      /config\.linux\.resources\.oom_score_adj 5000 is out of range/,
    );
    await rejectsWith(
      world.create(pod, world.config('sleeper', { linux: { resources: { memoryLimitInBytes: -2n } } })),
      'INVALID_ARGUMENT',
      /config\.linux\.resources\.memory_limit_in_bytes -2/,
    );
    const listed = await world.daemon.clients.runtime.listContainers(ListContainersRequest.fromPartial({}));
    assert.deepEqual(listed.containers.map((c) => c.podSandboxId).filter((p) => p === pod.id).length, 0);
  });

  it('RunPodSandbox with out-of-range pod resources is INVALID_ARGUMENT naming the field, and leaves no pod', async () => {
    const before = (await world.daemon.clients.runtime.listPodSandbox(ListPodSandboxRequest.fromPartial({}))).items.length;
    await rejectsWith(
      world.pods.run(world.pods.pod({ linux: { resources: { cpuShares: 1n } } })),
      'INVALID_ARGUMENT',
      /config\.linux\.resources\.cpu_shares 1 is out of range/,
    );
    await rejectsWith(
      world.pods.run(world.pods.pod({ linux: { overhead: { cpuQuota: -5n } } })),
      'INVALID_ARGUMENT',
      /config\.linux\.overhead\.cpu_quota -5 is out of range/,
    );
    assert.equal((await world.daemon.clients.runtime.listPodSandbox(ListPodSandboxRequest.fromPartial({}))).items.length, before);
  });
});
