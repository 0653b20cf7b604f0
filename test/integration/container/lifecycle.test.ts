/**
 * The container lifecycle through the CRI against a real `stove serve` (runc under conmon, a real CNI
 * pod): create, start, status, list, stop, remove; names; bad input; exits; stop escalation; events;
 * recovery after the daemon is SIGKILLed.
 */
import assert from 'node:assert/strict';
import { access, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ContainerEventType, ContainerFilter, ContainerState, ImageSpec, PodSandboxState, type ContainerEventResponse, type DeepPartial } from '../../../src/gen/runtime/v1/api.js';
import { containerSuite, ContainerWorld, eventually, pidAlive, rejectsWith } from './world.js';

const exists = (p: string) => access(p).then(() => true, () => false);
const nowNs = () => BigInt(Date.now()) * 1_000_000n;

/** The time of a CRI log line (`2006-01-02T15:04:05.999999999Z07:00 stdout F …`) in ns since the epoch. */
function logTimeNs(line: string): bigint {
  const [, whole, fraction, zone] = /^([^.]+)\.(\d{9})(\S+) /.exec(line)!;
  return BigInt(Date.parse(`${whole}${zone}`)) * 1_000_000n + BigInt(fraction!);
}

describe('containers: lifecycle (real runc, conmon and CNI)', function () {
  this.timeout(60_000);
  const world = new ContainerWorld();

  containerSuite(world, 'container tests', { scope: 'pods' });

  it('creates, starts, reports, lists, stops and removes a container', async () => {
    const rt = world.daemon.clients.runtime;
    const pod = await world.pod();
    const before = nowNs();
    const config = world.config('sleeper', {
      metadata: { name: 'main', attempt: 2 },
      labels: { app: 'web', tier: 'front' },
      annotations: { 'example.com/a': 'b' },
    });
    const id = await world.create(pod, config);
    assert.match(id, /^[0-9a-f]{64}$/);
    let { status } = await world.status(id);
    assert.equal(status!.state, ContainerState.CONTAINER_CREATED);
    assert.ok(status!.createdAt >= before && status!.createdAt <= nowNs());
    assert.equal(status!.startedAt, 0n);

    await rt.startContainer({ containerId: id });
    ({ status } = await world.status(id));
    const st = status!;
    assert.equal(st.state, ContainerState.CONTAINER_RUNNING);
    assert.ok(st.startedAt >= st.createdAt && st.startedAt <= nowNs());
    assert.deepEqual(st.metadata, { name: 'main', attempt: 2 });
    assert.equal(st.image!.image, world.image('sleeper').reference);
    assert.equal(st.imageRef, world.image('sleeper').digestReference, 'image_ref is the repo digest');
    assert.equal(st.imageId, world.image('sleeper').configDigest);
    assert.deepEqual(st.labels, { app: 'web', tier: 'front' });
    assert.deepEqual(st.annotations, { 'example.com/a': 'b' });
    assert.equal(st.logPath, join(pod.config.logDirectory, 'main.log'));
    assert.deepEqual(st.user!.linux, { uid: 0n, gid: 0n, supplementalGroups: [0n] });

    const info = await world.info(id);
    assert.ok(await pidAlive(info.pid));
    assert.deepEqual(info.runtimeSpec.process.args, ['sleep', '3600']);
    assert.match(await readFile(`/proc/${info.pid}/cmdline`, 'utf8'), /^sleep\0/);

    // Listing and its filters: ID prefix, state, pod prefix, labels.
    const other = await world.create(pod, world.config('sleeper', { labels: { app: 'db' } }));
    const list = async (filter: DeepPartial<ContainerFilter>) =>
      (await rt.listContainers({ filter: ContainerFilter.fromPartial(filter) })).containers.map((c) => c.id).sort();
    assert.deepEqual(await list({}), [id, other].sort());
    assert.deepEqual(await list({ id: id.slice(0, 10) }), [id]);
    assert.deepEqual(await list({ state: { state: ContainerState.CONTAINER_CREATED } }), [other]);
    assert.deepEqual(await list({ podSandboxId: pod.id.slice(0, 8) }), [id, other].sort());
    assert.deepEqual(await list({ podSandboxId: 'f'.repeat(64) }), []);
    assert.deepEqual(await list({ labelSelector: { app: 'web' } }), [id]);
    assert.deepEqual(await list({ labelSelector: { app: 'web', tier: 'back' } }), []);
    const entry = (await rt.listContainers({ filter: ContainerFilter.fromPartial({ id }) })).containers[0]!;
    assert.equal(entry.podSandboxId, pod.id);
    assert.equal(entry.state, ContainerState.CONTAINER_RUNNING);
    assert.equal(entry.imageRef, world.image('sleeper').digestReference);

    // sleep dies of SIGTERM at once: 128 + 15.
    await rt.stopContainer({ containerId: id.slice(0, 12), timeout: 10n });
    ({ status } = await world.status(id));
    assert.equal(status!.state, ContainerState.CONTAINER_EXITED);
    assert.equal(status!.exitCode, 143);
    assert.equal(status!.reason, 'Error');
    assert.ok(status!.finishedAt >= status!.startedAt);
    assert.equal(await pidAlive(info.pid), false);

    await rt.removeContainer({ containerId: id });
    await rejectsWith(world.status(id), 'NOT_FOUND', /not found/);
    assert.equal(await exists(info.bundle), false);
    await rt.removeContainer({ containerId: other });
    // Removing and stopping what is gone succeeds.
    await rt.removeContainer({ containerId: id });
    await rt.stopContainer({ containerId: id, timeout: 0n });
  });

  it("PodSandboxStatus carries, with its timestamp, every container's status, as ContainerStatus reports it", async () => {
    // A kubelet with the EventedPLEG gate takes these as the pod's containers.
    const rt = world.daemon.clients.runtime;
    const pod = await world.pod();
    const running = await world.run(pod, world.config('sleeper', { metadata: { name: 'running', attempt: 0 } }));
    const created = await world.create(pod, world.config('sleeper', { metadata: { name: 'created', attempt: 0 } }));
    const before = nowNs();
    const answer = await rt.podSandboxStatus({ podSandboxId: pod.id, verbose: false });
    assert.ok(answer.timestamp >= before && answer.timestamp <= nowNs() + 1_000_000n, "a timestamp of now (ns)");
    const byId = new Map(answer.containersStatuses.map((s) => [s.id, s]));
    assert.deepEqual([...byId.keys()].sort(), [running, created].sort());
    for (const id of [running, created]) assert.deepEqual(byId.get(id), (await world.status(id)).status);
    assert.equal(byId.get(running)!.state, ContainerState.CONTAINER_RUNNING);
    await rt.removeContainer({ containerId: created });
    assert.deepEqual((await rt.podSandboxStatus({ podSandboxId: pod.id, verbose: false })).containersStatuses.map((s) => s.id), [running]);
    const empty = await world.pod();
    assert.deepEqual((await rt.podSandboxStatus({ podSandboxId: empty.id, verbose: false })).containersStatuses, []);
  });

  it('reserves names: the same metadata in a pod is ALREADY_EXISTS until the holder is removed', async () => {
    const rt = world.daemon.clients.runtime;
    const pod = await world.pod();
    const config = world.config('sleeper', { metadata: { name: 'web', attempt: 0 } });
    const first = await world.create(pod, config);
    await rejectsWith(world.create(pod, config), 'ALREADY_EXISTS', new RegExp(`"web_.*_0" is reserved for ${first}`));
    const retry = await world.create(pod, world.config('sleeper', { metadata: { name: 'web', attempt: 1 } }));
    const otherPod = await world.pod();
    await world.create(otherPod, config);
    await rt.removeContainer({ containerId: first });
    const again = await world.create(pod, config);
    assert.notEqual(again, first);
    assert.notEqual(again, retry);
  });

  it('answers bad requests with the right code and a clear message, leaving nothing behind', async () => {
    const rt = world.daemon.clients.runtime;
    const pod = await world.pod();
    const create = (config: ReturnType<typeof world.config>, podSandboxId = pod.id) =>
      rt.createContainer({ podSandboxId, config, sandboxConfig: pod.config });
    await rejectsWith(create(world.config('sleeper'), 'f'.repeat(64)), 'NOT_FOUND', /sandbox "f{64}" not found/);
    await rejectsWith(create(world.config('sleeper'), ''), 'INVALID_ARGUMENT', /pod_sandbox_id is required/);
    await rejectsWith(rt.createContainer({ podSandboxId: pod.id, config: undefined, sandboxConfig: undefined }), 'INVALID_ARGUMENT', /config is required/);
    await rejectsWith(create({ ...world.config('sleeper'), metadata: undefined }), 'INVALID_ARGUMENT', /config\.metadata is required/);
    await rejectsWith(create({ ...world.config('sleeper'), image: ImageSpec.fromPartial({ image: '' }) }), 'INVALID_ARGUMENT', /config\.image\.image is required/);
    const missing = `${world.registry.host}/ctr/not-pulled:1`;
    await rejectsWith(create({ ...world.config('sleeper'), image: ImageSpec.fromPartial({ image: missing }) }), 'NOT_FOUND', /image ".*not-pulled:1" not found: pull it/);
    await rejectsWith(
      create(world.config('sleeper', { linux: { securityContext: { privileged: true } } })),
      'INVALID_ARGUMENT',
      /privileged container.*pod sandbox is not privileged/,
    );
    await rejectsWith(
      create(world.config('sleeper', { linux: { securityContext: { runAsUsername: 'nosuchuser' } } })),
      'INVALID_ARGUMENT',
      /nosuchuser/,
    );
    // runc looks the binary up at create time: the create fails with the runtime's message.
    await rejectsWith(create(world.config('busybox', { command: ['/no/such/binary'] })), 'INTERNAL', /failed to create container.*\/no\/such\/binary.*no such file or directory/);
    // A mount whose host path is missing: the path is created (Docker's behaviour, which the kubelet relies on).
    const hostPath = join(world.daemon.dir, 'made-by-create', 'data');
    const withMount = await world.create(pod, world.config('sleeper', { mounts: [{ containerPath: '/data', hostPath }] }));
    assert.ok(await exists(hostPath));
    await rt.removeContainer({ containerId: withMount });
    // Nothing of the failed creates is left.
    assert.deepEqual((await rt.listContainers({ filter: undefined })).containers, []);
    assert.deepEqual(await world.containerLeftovers(), []);

    // Lifecycle errors.
    await rejectsWith(rt.startContainer({ containerId: 'f'.repeat(64) }), 'NOT_FOUND', /container "f{64}" not found/);
    const running = await world.run(pod, world.config('sleeper'));
    await rejectsWith(rt.startContainer({ containerId: running }), 'FAILED_PRECONDITION', /is RUNNING: only a CREATED container can be started/);
    // A pod that is not ready takes no containers and starts none of those it has.
    const created = await world.create(pod, world.config('sleeper'));
    await rt.stopPodSandbox({ podSandboxId: pod.id });
    await rejectsWith(create(world.config('sleeper')), 'FAILED_PRECONDITION', /sandbox ".*" is not ready/);
    await rejectsWith(rt.startContainer({ containerId: created }), 'FAILED_PRECONDITION', /sandbox ".*" is not ready: containers can only be started in a ready sandbox/);
    assert.notEqual((await world.status(created)).status!.state, ContainerState.CONTAINER_RUNNING);
    assert.equal((await world.status(running)).status!.state, ContainerState.CONTAINER_EXITED, 'stopping the pod stopped its container');
  });

  it('reports exits within a second: Completed and Error with the exit code', async () => {
    const pod = await world.pod();
    const ok = await world.run(pod, world.config('busybox', { command: ['true'] }));
    const bad = await world.run(pod, world.config('busybox', { command: ['sh', '-c', 'exit 7'] }));
    const started = Date.now();
    const a = await world.waitExited(ok, 1000);
    const b = await world.waitExited(bad, 1000);
    assert.ok(Date.now() - started < 1500);
    assert.equal(a.exitCode, 0);
    assert.equal(a.reason, 'Completed');
    assert.equal(b.exitCode, 7);
    assert.equal(b.reason, 'Error');
    assert.ok(b.finishedAt >= b.startedAt && b.finishedAt <= nowNs());
    // A stopped container's stop is a no-op.
    await world.daemon.clients.runtime.stopContainer({ containerId: bad, timeout: 5n });
    assert.equal((await world.status(bad)).status!.exitCode, 7);
  });

  it('stops with the image StopSignal, and escalates to SIGKILL when the process ignores it', async () => {
    const rt = world.daemon.clients.runtime;
    const pod = await world.pod();
    const usr1 = await world.run(pod, world.config('usr1'));
    const stubborn = await world.run(pod, world.config('busybox', { command: ['sh', '-c', 'trap "echo got TERM" TERM; echo ready; while true; do sleep 0.1; done'] }));
    await eventually('both ready', async () => (await world.logLines((await world.status(stubborn)).status!.logPath)).length > 0 && (await world.logLines((await world.status(usr1)).status!.logPath)).length > 0);

    let t = Date.now();
    await rt.stopContainer({ containerId: usr1, timeout: 10n });
    assert.ok(Date.now() - t < 3000, 'SIGUSR1 stopped it at once');
    assert.equal((await world.status(usr1)).status!.exitCode, 3);

    await rt.stopContainer({ containerId: stubborn, timeout: 2n });
    const st = (await world.status(stubborn)).status!;
    assert.equal(st.exitCode, 137);
    assert.equal(st.reason, 'Error');
    // The container's own record: its trap logged SIGTERM, and SIGKILL ended it once the 2 s timeout
    // had passed (the trap runs between 0.1 s sleeps, so it logs up to a moment late).
    const term = (await readFile(st.logPath, 'utf8')).split('\n').find((l) => l.endsWith(' got TERM'));
    assert.ok(term, 'SIGTERM came first');
    const graceMs = Number(st.finishedAt - logTimeNs(term)) / 1e6;
    assert.ok(graceMs >= 1500 && graceMs < 6000, `SIGKILL ${graceMs.toFixed(0)} ms after the trap logged SIGTERM; the timeout was 2 s`);
  });

  it('streams CREATED, STARTED, STOPPED and DELETED events in order to every subscriber', async () => {
    const subscribers = [0, 1, 2].map(() => {
      const events: ContainerEventResponse[] = [];
      const call = world.daemon.clients.rawRuntime.getContainerEvents({});
      const live = new Promise<void>((resolve) => call.once('metadata', () => resolve()));
      call.on('data', (e: ContainerEventResponse) => events.push(e));
      call.on('error', () => {});
      return { events, call, live };
    });
    // The daemon sends the headers once the subscription is in place.
    await Promise.all(subscribers.map((s) => s.live));
    const rt = world.daemon.clients.runtime;
    const pod = await world.pod();
    const id = await world.run(pod, world.config('busybox', { command: ['sh', '-c', 'sleep 0.3; exit 2'] }));
    await world.waitExited(id);
    await rt.removeContainer({ containerId: id });
    for (const { events } of subscribers) {
      await eventually('four events', async () => events.filter((e) => e.containerId === id).length >= 4);
      const mine = events.filter((e) => e.containerId === id);
      assert.deepEqual(
        mine.map((e) => ContainerEventType[e.containerEventType]),
        ['CONTAINER_CREATED_EVENT', 'CONTAINER_STARTED_EVENT', 'CONTAINER_STOPPED_EVENT', 'CONTAINER_DELETED_EVENT'],
      );
      const created = mine[0]!;
      assert.equal(created.podSandboxStatus!.id, pod.id);
      assert.equal(created.containersStatuses.find((s) => s.id === id)!.state, ContainerState.CONTAINER_CREATED);
      const stopped = mine[2]!;
      const stoppedStatus = stopped.containersStatuses.find((s) => s.id === id)!;
      assert.equal(stoppedStatus.state, ContainerState.CONTAINER_EXITED);
      assert.equal(stoppedStatus.exitCode, 2);
      assert.equal(mine[3]!.containersStatuses.find((s) => s.id === id), undefined);
      for (let i = 1; i < mine.length; i++) assert.ok(mine[i]!.createdAt >= mine[i - 1]!.createdAt);
    }
    // The pod has events of its own, with its ID as container_id.
    await rt.stopPodSandbox({ podSandboxId: pod.id });
    await rt.removePodSandbox({ podSandboxId: pod.id });
    for (const { events, call } of subscribers) {
      await eventually('pod events', async () => events.filter((e) => e.containerId === pod.id).length >= 4);
      const podEvents = events.filter((e) => e.containerId === pod.id);
      assert.deepEqual(
        podEvents.map((e) => ContainerEventType[e.containerEventType]),
        ['CONTAINER_CREATED_EVENT', 'CONTAINER_STARTED_EVENT', 'CONTAINER_STOPPED_EVENT', 'CONTAINER_DELETED_EVENT'],
      );
      assert.equal(podEvents[1]!.podSandboxStatus!.state, PodSandboxState.SANDBOX_READY);
      assert.equal(podEvents[2]!.podSandboxStatus!.state, PodSandboxState.SANDBOX_NOTREADY);
      call.cancel();
    }
  });

  it('recovers after SIGKILL: running containers keep running and logging, exits while down are found', async () => {
    const rt = () => world.daemon.clients.runtime;
    const pod = await world.pod();
    const ticker = world.config('busybox', { command: ['sh', '-c', 'i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done'] });
    const running = await world.run(pod, ticker);
    const exitsLater = await world.run(pod, world.config('busybox', { command: ['sh', '-c', 'sleep 1.5; exit 5'] }));
    const orphaned = await world.run(pod, world.config('sleeper'));
    const created = await world.create(pod, world.config('sleeper'));
    const logPath = (await world.status(running)).status!.logPath;
    const runningPid = (await world.info(running)).pid;
    const exitsLaterPid = (await world.info(exitsLater)).pid;
    const orphanConmon = (JSON.parse((await world.status(orphaned, true)).info.info!) as { conmonPid: number }).conmonPid;

    await world.daemon.stop('SIGKILL');
    // While Stove is down: one container exits by itself, another loses its conmon.
    process.kill(orphanConmon, 'SIGKILL');
    const linesBefore = (await world.logLines(logPath)).length;
    await eventually('conmon logging while Stove is down', async () => (await world.logLines(logPath)).length > linesBefore);
    await eventually('a container exiting while Stove is down', async () => !(await pidAlive(exitsLaterPid)), 10_000);
    await world.pods.restart('SIGKILL');

    const state = async (id: string) => (await world.status(id)).status!;
    assert.equal((await state(running)).state, ContainerState.CONTAINER_RUNNING);
    assert.equal((await world.info(running)).pid, runningPid);
    assert.equal((await state(created)).state, ContainerState.CONTAINER_CREATED);
    const exited = await state(exitsLater);
    assert.equal(exited.state, ContainerState.CONTAINER_EXITED);
    assert.equal(exited.exitCode, 5);
    assert.equal(exited.reason, 'Error');
    const lost = await state(orphaned);
    assert.equal(lost.state, ContainerState.CONTAINER_EXITED);
    assert.equal(lost.exitCode, 255);
    assert.equal(lost.reason, 'Unknown');
    // The running container is still fully managed: logs continue, stop works, ExecSync works.
    const n = (await world.logLines(logPath)).length;
    await eventually('more log lines', async () => (await world.logLines(logPath)).length > n);
    assert.equal((await world.exec(running, ['echo', 'hi'])).stdout, 'hi\n');
    await rt().stopContainer({ containerId: running, timeout: 0n });
    assert.equal((await state(running)).exitCode, 137);
    await rt().startContainer({ containerId: created });
    assert.equal((await state(created)).state, ContainerState.CONTAINER_RUNNING);
  });
});
