/**
 * Running containers through the CRI against a real `stove serve`: the OOM killer's reason, CRI logs
 * and their rotation, stats under load, resource updates, ExecSync (exit codes, timeouts, truncation,
 * many at once).
 */
import assert from 'node:assert/strict';
import { readFile, rename, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Metadata, status, type ServiceError } from '@grpc/grpc-js';
import { ContainerStatsFilter, ExecSyncRequest, PodSandboxStatsFilter, UpdateContainerResourcesRequest } from '../../../src/gen/runtime/v1/api.js';
import { cgroupDirs, detectCgroups } from '../../../src/platform/cgroups.js';
import { execInNetns } from '../../../src/network/netns-exec.js';
import { containerSuite, ContainerWorld, eventually, rejectsWith } from './world.js';

/** The CPU time (ns) a host process has spent running: the first field of /proc/<pid>/schedstat. */
async function cpuTimeNs(pid: number): Promise<bigint> {
  return BigInt((await readFile(`/proc/${pid}/schedstat`, 'utf8')).split(' ')[0]!);
}

describe('containers: logs, stats, updates, OOM and ExecSync (real runc, conmon and CNI)', function () {
  this.timeout(60_000);
  const world = new ContainerWorld();
  let pod: Awaited<ReturnType<ContainerWorld['pod']>>;

  containerSuite(world, 'container tests', { scope: 'containers', setup: async () => { pod = await world.pod(); } });

  it('reports OOMKilled for a container the kernel killed at its memory limit', async () => {
    const id = await world.run(
      pod,
      world.config('busybox', { command: ['tail', '/dev/zero'], linux: { resources: { memoryLimitInBytes: 32n * 1024n * 1024n } } }),
    );
    const st = await world.waitExited(id, 20_000);
    assert.equal(st.reason, 'OOMKilled');
    assert.equal(st.exitCode, 137);
  });

  it('writes CRI logs, and rotates them with ReopenContainerLog', async () => {
    const rt = world.daemon.clients.runtime;
    const id = await world.run(
      pod,
      world.config('busybox', { command: ['sh', '-c', 'echo out-1; echo err-1 >&2; printf partial; sleep 0.2; echo; i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done'] }),
    );
    const logPath = (await world.status(id)).status!.logPath;
    await eventually('first lines', async () => (await world.logLines(logPath)).length >= 4);
    const lines = await world.logLines(logPath);
    // conmon keeps each stream's order (not the order between stdout and stderr).
    const stdout = lines.filter((l) => l.stream === 'stdout');
    assert.deepEqual(stdout.slice(0, 2), [
      { stream: 'stdout', tag: 'F', text: 'out-1' },
      { stream: 'stdout', tag: 'P', text: 'partial' },
    ]);
    assert.deepEqual(lines.filter((l) => l.stream === 'stderr'), [{ stream: 'stderr', tag: 'F', text: 'err-1' }]);
    assert.match((await readFile(logPath, 'utf8')).split('\n')[0]!, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}[+-]\d\d:\d\d std(out|err) F (out|err)-1$/);

    // The kubelet's rotation: rename, then ReopenContainerLog; the new file exists when the call returns.
    const rotated = `${logPath}.20240101-000000`;
    await rename(logPath, rotated);
    await rt.reopenContainerLog({ containerId: id });
    await stat(logPath);
    await eventually('ticks in the new file', async () => (await world.logLines(logPath)).some((l) => l.text.startsWith('tick')));
    const oldSize = (await stat(rotated)).size;
    // Four more ticks in the new file mark time in which the rotated one must not have grown.
    const ticks = async () => (await world.logLines(logPath)).filter((l) => l.text.startsWith('tick')).length;
    const seen = await ticks();
    await eventually('four more ticks in the new file', async () => (await ticks()) >= seen + 4);
    assert.equal((await stat(rotated)).size, oldSize, 'the rotated file stopped growing');

    await rt.stopContainer({ containerId: id, timeout: 0n });
    await rejectsWith(rt.reopenContainerLog({ containerId: id }), 'FAILED_PRECONDITION', /not running/);
    await rejectsWith(rt.reopenContainerLog({ containerId: 'f'.repeat(64) }), 'NOT_FOUND', /not found/);
  });

  it('reports container and pod stats that follow the load', async () => {
    const rt = world.daemon.clients.runtime;
    const busy = await world.run(pod, world.config('busybox', { command: ['sh', '-c', 'while true; do :; done'], labels: { role: 'busy' } }));
    const idle = await world.run(pod, world.config('sleeper', { labels: { role: 'idle' } }));
    await world.exec(idle, ['sh', '-c', 'head -c 3000000 /dev/zero > /big']);
    // The yardstick: the same loop in a sibling container, its CPU time read from the host's /proc. On
    // a busy machine neither gets a whole core; the busy container's stats must show about as much.
    const yardstick = await world.run(pod, world.config('busybox', { command: ['sh', '-c', 'while true; do :; done'] }));
    const yardstickPid = (await world.info(yardstick)).pid;
    const first = (await rt.containerStats({ containerId: busy })).stats!;
    const ref1 = await cpuTimeNs(yardstickPid);
    const wall1 = process.hrtime.bigint();
    await eventually('the yardstick to use 300 ms of CPU', async () => (await cpuTimeNs(yardstickPid)) - ref1 >= 300_000_000n, 30_000);
    const second = (await rt.containerStats({ containerId: busy })).stats!;
    const refUsed = (await cpuTimeNs(yardstickPid)) - ref1;
    const refNanoCores = (refUsed * 1_000_000_000n) / (process.hrtime.bigint() - wall1);
    await rt.removeContainer({ containerId: yardstick });
    const cpu1 = first.cpu!.usageCoreNanoSeconds!.value;
    const cpu2 = second.cpu!.usageCoreNanoSeconds!.value;
    assert.ok((cpu2 - cpu1) * 3n > refUsed, `busy loop used ${cpu2 - cpu1} ns of CPU, the same loop beside it ${refUsed} ns`);
    assert.ok(second.cpu!.timestamp > first.cpu!.timestamp);
    const nanoCores = second.cpu!.usageNanoCores!.value;
    assert.equal(nanoCores, ((cpu2 - cpu1) * 1_000_000_000n) / (second.cpu!.timestamp - first.cpu!.timestamp), 'the rate since the previous reading');
    assert.ok(nanoCores * 3n > refNanoCores, `busy loop ran at ${nanoCores} nanocores, the same loop beside it at ${refNanoCores}`);
    assert.ok(second.memory!.workingSetBytes!.value > 0n);
    assert.equal(second.attributes!.id, busy);
    assert.deepEqual(second.attributes!.labels, { role: 'busy' });

    const idleStats = (await rt.containerStats({ containerId: idle })).stats!;
    assert.ok(idleStats.writableLayer!.usedBytes!.value >= 3_000_000n, `writable layer holds /big (${idleStats.writableLayer!.usedBytes!.value})`);
    assert.ok(idleStats.writableLayer!.inodesUsed!.value >= 1n);
    assert.ok(idleStats.writableLayer!.fsId!.mountpoint.startsWith(world.daemon.root));

    const list = async (f: Partial<ContainerStatsFilter>) =>
      (await rt.listContainerStats({ filter: ContainerStatsFilter.fromPartial(f) })).stats.map((s) => s.attributes!.id).sort();
    assert.deepEqual(await list({}), [busy, idle].sort());
    assert.deepEqual(await list({ labelSelector: { role: 'idle' } }), [idle]);
    assert.deepEqual(await list({ id: busy.slice(0, 8) }), [busy]);
    assert.deepEqual(await list({ podSandboxId: pod.id }), [busy, idle].sort());

    // Pod stats: the pod's interface counters move with traffic, processes are counted.
    const info = JSON.parse((await world.pods.status(pod.id, true)).info.info!) as { netnsPath: string };
    const podStats = async () => (await rt.podSandboxStats({ podSandboxId: pod.id })).stats!;
    const before = await podStats();
    await execInNetns(info.netnsPath, ['busybox', 'ping', '-c', '2', '-i', '0.2', '-W', '1', world.pods.net.gateway], { timeoutMs: 5000 });
    const after = await podStats();
    assert.equal(after.attributes!.id, pod.id);
    assert.equal(after.linux!.network!.defaultInterface!.name, 'eth0');
    assert.ok(after.linux!.network!.defaultInterface!.txBytes!.value > before.linux!.network!.defaultInterface!.txBytes!.value);
    assert.ok(after.linux!.network!.defaultInterface!.rxBytes!.value > before.linux!.network!.defaultInterface!.rxBytes!.value);
    assert.ok(after.linux!.process!.processCount!.value >= 3n, 'pause + sh + sleep');
    assert.ok(after.linux!.cpu!.usageCoreNanoSeconds!.value >= cpu2);
    assert.deepEqual(after.linux!.containers.map((c) => c.attributes!.id).sort(), [busy, idle].sort());
    const listed = await rt.listPodSandboxStats({ filter: PodSandboxStatsFilter.fromPartial({ id: pod.id }) });
    assert.deepEqual(listed.stats.map((s) => s.attributes!.id), [pod.id]);
    await rejectsWith(rt.containerStats({ containerId: 'f'.repeat(64) }), 'NOT_FOUND', /not found/);
  });

  it('updates resources of a running container in its cgroup, status and spec', async () => {
    const rt = world.daemon.clients.runtime;
    const id = await world.run(pod, world.config('sleeper', { linux: { resources: { cpuShares: 512n, memoryLimitInBytes: 64n << 20n } } }));
    await rt.updateContainerResources(
      UpdateContainerResourcesRequest.fromPartial({ containerId: id, linux: { memoryLimitInBytes: 128n << 20n, cpuQuota: 50_000n, cpuPeriod: 100_000n } }),
    );
    const info = await world.info(id);
    const layout = await detectCgroups();
    const dirs = cgroupDirs(layout, info.cgroupsPath);
    if (layout.version === 1) {
      assert.equal((await readFile(join(dirs.memory!, 'memory.limit_in_bytes'), 'utf8')).trim(), String(128 << 20));
      assert.equal((await readFile(join(dirs.cpu!, 'cpu.cfs_quota_us'), 'utf8')).trim(), '50000');
      assert.equal((await readFile(join(dirs.cpu!, 'cpu.shares'), 'utf8')).trim(), '512', 'unset fields keep their values');
    } else {
      assert.equal((await readFile(join(dirs.unified!, 'memory.max'), 'utf8')).trim(), String(128 << 20));
    }
    const res = (await world.status(id)).status!.resources!.linux!;
    assert.equal(res.memoryLimitInBytes, 128n << 20n);
    assert.equal(res.cpuQuota, 50_000n);
    assert.equal(res.cpuShares, 512n);
    assert.equal(info.runtimeSpec.linux.resources.memory.limit, 128 << 20);
    assert.equal(info.runtimeSpec.linux.resources.cpu.quota, 50_000);
    await rt.stopContainer({ containerId: id, timeout: 0n });
    await rejectsWith(
      rt.updateContainerResources(UpdateContainerResourcesRequest.fromPartial({ containerId: id, linux: { memoryLimitInBytes: 1n << 30n } })),
      'FAILED_PRECONDITION',
      /EXITED/,
    );
  });

  it('runs ExecSync: exit codes, stderr, timeouts, truncation, and many at once', async () => {
    const rt = world.daemon.clients.runtime;
    const id = await world.run(pod, world.config('app', { command: ['sleep', '3600'], envs: [{ key: 'FROM_CRI', value: 'yes' }] }));
    const r = await world.exec(id, ['sh', '-c', 'echo $FROM_CRI $(pwd) $(id -u); echo oops >&2; exit 3']);
    assert.deepEqual(r, { stdout: 'yes /srv/app 1000\n', stderr: 'oops\n', exitCode: 3 });

    const t = Date.now();
    const msg = await rejectsWith(rt.execSync({ containerId: id, cmd: ['sleep', '30'], timeout: 1n }), 'DEADLINE_EXCEEDED', /command "sleep 30" .*timed out after 1s/);
    assert.ok(Date.now() - t < 5000, msg);
    await eventually('the timed-out command killed', async () => (await world.exec(id, ['sh', '-c', 'ps -o args | grep -c "^sleep 30"'])).stdout.trim() === '0');

    // More than 16 MiB of output is cut, and the cut is said at the end of stderr.
    const big = await rt.execSync({ containerId: id, cmd: ['sh', '-c', 'head -c 20000000 /dev/zero | tr "\\0" a'], timeout: 30n });
    assert.ok(big.stdout.length > 15_000_000 && big.stdout.length < 16 * 1024 * 1024, `${big.stdout.length} bytes`);
    assert.match(big.stderr.toString(), /output truncated/);

    const many = await Promise.all(Array.from({ length: 20 }, (_v, i) => world.exec(id, ['echo', `probe-${i}`])));
    assert.deepEqual(many.map((m) => m.stdout), Array.from({ length: 20 }, (_v, i) => `probe-${i}\n`));

    await rejectsWith(rt.execSync({ containerId: id, cmd: [], timeout: 0n }), 'INVALID_ARGUMENT', /cmd is required/);
    await rejectsWith(rt.execSync({ containerId: 'f'.repeat(64), cmd: ['true'], timeout: 0n }), 'NOT_FOUND', /not found/);
    await rt.stopContainer({ containerId: id, timeout: 0n });
    await rejectsWith(rt.execSync({ containerId: id, cmd: ['true'], timeout: 0n }), 'FAILED_PRECONDITION', /not running/);
  });

  it('kills an ExecSync command once the client\'s deadline passed (no CRI timeout), as on its own timeout', async () => {
    const id = await world.run(pod, world.config('app', { command: ['sleep', '3600'] }));
    const running = async () => Number((await world.exec(id, ['sh', '-c', 'ps -o args | grep -c "^sleep 31"'])).stdout.trim());
    const call = new Promise<ServiceError | null>((resolve) =>
      world.daemon.clients.rawRuntime.execSync(
        ExecSyncRequest.fromPartial({ containerId: id, cmd: ['sleep', '31'], timeout: 0n }),
        new Metadata(),
        { deadline: Date.now() + 3000 },
        (e) => resolve(e),
      ),
    );
    await eventually('the command started', async () => (await running()) === 1);
    assert.equal((await call)?.code, status.DEADLINE_EXCEEDED);
    // Without the kill, `sleep 31` would run on for half a minute after its caller left.
    await eventually('the command of the call that ended was killed', async () => (await running()) === 0);
  });
});
