/** The container service over fakes: create cleanup, start, stop escalation, exits, events, recovery. */
import assert from 'node:assert/strict';
import { access, mkdir, readdir, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { ContainerConfig, ContainerEventType, PodSandboxConfig, type ContainerEventResponse, type DeepPartial } from '../../../src/gen/runtime/v1/api.js';
import { recoverContainers } from '../../../src/container/recover.js';
import { ContainerService } from '../../../src/container/service.js';
import { getContainerEvents } from '../../../src/cri/get-container-events.js';
import { rejectsKind } from '../oci/helpers.js';
import { harness, IMAGE_NAME, type Harness } from './fakes.js';

const SANDBOX = 'b'.repeat(64);
const exists = (p: string) => access(p).then(() => true, () => false);

function config(p: DeepPartial<ContainerConfig> = {}): ContainerConfig {
  return ContainerConfig.fromPartial({ metadata: { name: 'app', attempt: 0 }, image: { image: IMAGE_NAME }, logPath: 'app.log', ...p });
}

/** A sink that records events. */
function sink() {
  const events: ContainerEventResponse[] = [];
  return {
    events,
    closed: false,
    write(e: ContainerEventResponse) {
      events.push(e);
      return true;
    },
    end() {
      this.closed = true;
    },
    onClose() {},
    drained: () => Promise.resolve(),
  };
}

describe('container service (fakes)', () => {
  let h: Harness;
  beforeEach(async () => {
    h = await harness();
    h.sandboxes.add(SANDBOX);
  });
  afterEach(() => h.cleanup());

  it('creates a record with the image facts, the user and the log path, and reserves the name', async () => {
    const r = await h.service.create(SANDBOX, config({ linux: { securityContext: { runAsUser: { value: 1000n } } } }));
    assert.equal(r.state, 'created');
    assert.equal(r.imageId, 'sha256:' + '1'.repeat(64));
    assert.match(r.imageRef, /^registry\.test\/app@sha256:2{64}$/);
    assert.equal(r.stopSignal, 'SIGQUIT');
    assert.equal(r.logPath, join(h.dir, 'pod-logs', 'app.log'));
    assert.deepEqual(r.user, { uid: 1000, gid: 1000, additionalGids: [1000] });
    assert.deepEqual((r.process as { args: string[] }).args, ['sleep', '60']);
    assert.ok(await exists(join(h.dir, 'state', 'containers', r.id, 'config.json')));
    await rejectsKind(h.service.create(SANDBOX, config()), 'AlreadyExists', /name "app_pod-bbbb_ns_uid-b+_0" is reserved/);
  });

  it('leaves nothing behind when the runtime create fails', async () => {
    h.monitor.failCreate = new Error('runc create failed: boom');
    await assert.rejects(h.service.create(SANDBOX, config()), /failed to create container "app" in sandbox "b{64}": runc create failed: boom/);
    assert.deepEqual(h.service.list(), []);
    assert.deepEqual(h.images.holders(), []);
    assert.deepEqual(await readdir(join(h.dir, 'state', 'containers')).catch(() => []), []);
    assert.deepEqual(await readdir(join(h.dir, 'root', 'containers')).catch(() => []), []);
    // The name is free again.
    h.monitor.failCreate = undefined;
    await h.service.create(SANDBOX, config());
  });

  it('leaves no bundle dir behind when the log path is refused', async () => {
    const logDirectory = join(h.dir, 'logs');
    await mkdir(logDirectory);
    await symlink('/etc/hostname', join(logDirectory, 'linked.log'));
    const podConfig = PodSandboxConfig.fromPartial({ metadata: { name: 'pod-c', namespace: 'ns', uid: 'uid-c', attempt: 0 }, logDirectory });
    h.sandboxes.add('c'.repeat(64), { config: PodSandboxConfig.toJSON(podConfig) });
    for (let i = 0; i < 20; i++) {
      await rejectsKind(h.service.create('c'.repeat(64), config({ logPath: 'linked.log', metadata: { name: `app${i}` } })), 'FailedPrecondition', /logs\/linked\.log" is a symbolic link/);
    }
    assert.deepEqual(await readdir(join(h.dir, 'state', 'containers')).catch(() => []), []);
    assert.deepEqual(await readdir(join(h.dir, 'root', 'containers')).catch(() => []), []);
  });

  it('refuses unknown and not-ready sandboxes, missing images and privileged containers before doing anything', async () => {
    await rejectsKind(h.service.create('f'.repeat(64), config()), 'NotFound', /sandbox "f{64}" not found/);
    h.sandboxes.add('c'.repeat(64), { state: 'notready' });
    await rejectsKind(h.service.create('c'.repeat(64), config()), 'FailedPrecondition', /is not ready/);
    await rejectsKind(h.service.create(SANDBOX, config({ image: { image: 'other:1' } })), 'NotFound', /image "other:1" not found: pull it/);
    await rejectsKind(h.service.create(SANDBOX, config({ linux: { securityContext: { privileged: true } } })), 'InvalidArgument', /not privileged/);
    assert.deepEqual(h.images.calls, []);
    assert.deepEqual(h.monitor.calls, []);
  });

  it('takes an image whose manifest marks a checkpoint as one to restore, unpacking its layer; not where restores are not set up', async () => {
    h.images.annotations = { 'io.kubernetes.cri-o.annotations.checkpoint.name': 'counter' };
    await rejectsKind(h.service.create(SANDBOX, config()), 'FailedPrecondition', /cannot restore a container from checkpoint image "registry\.test\/app:1": checkpoint and restore are not set up/);
    assert.deepEqual(h.images.calls, [], 'nothing mounted from a checkpoint image as if it were a root filesystem');

    const withCheckpoints = new ContainerService({ ...h.options, checkpoint: { dirs: [h.dir], criu: { require: async () => {} }, runtimeName: 'runc' } });
    h.images.annotations = { 'org.criu.checkpoint.container.name': 'counter' };
    // The fake unpacker writes nothing: the archive's metadata is missing, and nothing stays.
    await rejectsKind(withCheckpoints.create(SANDBOX, config()), 'FailedPrecondition', /from checkpoint image "registry\.test\/app:1"/);
    assert.deepEqual(h.images.calls, ['unpack /nonexistent/blobs/layer']);
    assert.deepEqual(await readdir(join(h.dir, 'root', 'containers')).catch(() => []), []);
  });

  it('starts only CREATED containers, and records a failed start as StartError', async () => {
    const r = await h.service.create(SANDBOX, config());
    await h.service.start(r.id.slice(0, 6));
    assert.equal(h.service.get(r.id).state, 'running');
    await rejectsKind(h.service.start(r.id), 'FailedPrecondition', /is RUNNING: only a CREATED container can be started/);
    const bad = await h.service.create(SANDBOX, config({ metadata: { name: 'bad', attempt: 0 } }));
    h.runtime.failStart = true;
    await assert.rejects(h.service.start(bad.id), /failed to start container/);
    const after = h.service.get(bad.id);
    assert.equal(after.state, 'exited');
    assert.equal(after.reason, 'StartError');
    assert.equal(after.exitCode, 128);
    assert.match(after.message, /executable file not found/);
  });

  it('stops with the stop signal, then SIGKILL after the timeout; applies the exit', async () => {
    const r = await h.service.create(SANDBOX, config());
    await h.service.start(r.id);
    const sent = new Map<string, number>();
    h.runtime.onKill = (id, signal) => {
      sent.set(signal, performance.now());
      if (signal === 'SIGKILL') h.monitor.exits.set(id, { id, exitCode: 137, finishedAtNs: 5n * 10n ** 18n });
    };
    await h.service.stop(r.id, 1);
    // SIGKILL only once the 1 s timeout after the stop signal has run out.
    assert.ok(sent.get('SIGKILL')! - sent.get('SIGQUIT')! >= 950, `SIGKILL ${sent.get('SIGKILL')! - sent.get('SIGQUIT')!} ms after SIGQUIT`);
    assert.deepEqual(h.runtime.calls.filter((c) => c.startsWith('kill')), [`kill ${r.id} SIGQUIT`, `kill ${r.id} SIGKILL`]);
    const st = h.service.get(r.id);
    assert.equal(st.state, 'exited');
    assert.equal(st.exitCode, 137);
    assert.equal(st.reason, 'Error');
    // Stopping again, or stopping the unknown, does nothing.
    await h.service.stop(r.id, 1);
    await h.service.stop('f'.repeat(64), 1);
    assert.equal(h.runtime.calls.filter((c) => c.startsWith('kill')).length, 2);
  });

  it('handles exit files, emits events in order, and removes everything', async () => {
    const s = sink();
    getContainerEvents(h.events, {}, s);
    const r = await h.service.create(SANDBOX, config());
    await h.service.start(r.id);
    assert.equal(await h.service.handleExit({ id: r.id, exitCode: 0, finishedAtNs: 10n ** 19n }), true);
    assert.equal(await h.service.handleExit({ id: 'f'.repeat(64), exitCode: 0, finishedAtNs: 1n }), false);
    assert.equal(h.service.get(r.id).reason, 'Completed');
    await h.service.remove(r.id);
    await h.service.remove(r.id);
    assert.deepEqual(
      s.events.map((e) => ContainerEventType[e.containerEventType]),
      ['CONTAINER_CREATED_EVENT', 'CONTAINER_STARTED_EVENT', 'CONTAINER_STOPPED_EVENT', 'CONTAINER_DELETED_EVENT'],
    );
    assert.equal(s.events[2]!.containersStatuses[0]!.exitCode, 0);
    assert.deepEqual(s.events[3]!.containersStatuses, []);
    assert.deepEqual(h.service.list(), []);
    assert.deepEqual(h.images.holders(), []);
    assert.ok(h.monitor.calls.includes(`forget ${r.id}`));
    assert.equal(await exists(join(h.dir, 'state', 'containers', r.id)), false);
  });

  it('recovers: a live monitor keeps a container running; a dead one with no exit file means 255 Unknown', async () => {
    const a = await h.service.create(SANDBOX, config({ metadata: { name: 'a', attempt: 0 } }));
    const b = await h.service.create(SANDBOX, config({ metadata: { name: 'b', attempt: 0 } }));
    const c = await h.service.create(SANDBOX, config({ metadata: { name: 'c', attempt: 0 } }));
    for (const r of [a, b, c]) await h.service.start(r.id);
    h.monitor.exits.set(b.id, { id: b.id, exitCode: 4, finishedAtNs: 10n ** 19n });
    h.runtime.states.set(b.id, 'stopped');

    // Restart: a stays running (monitor alive, runtime running); b exited with its file.
    const { service: again, options: againOptions } = h.restart();
    await recoverContainers(again, againOptions);
    assert.equal(again.get(a.id).state, 'running');
    assert.equal(again.get(b.id).exitCode, 4);
    // The names are reserved again.
    await rejectsKind(again.create(SANDBOX, config({ metadata: { name: 'a', attempt: 0 } })), 'AlreadyExists', /reserved/);

    // Restart with every monitor gone: c has no exit file → 255 Unknown, and its process is killed.
    h.monitor.alive = false;
    const { service: third, options: thirdOptions } = h.restart();
    await recoverContainers(third, thirdOptions);
    const lost = third.get(c.id);
    assert.equal(lost.exitCode, 255);
    assert.equal(lost.reason, 'Unknown');
    assert.ok(h.runtime.calls.includes(`kill ${c.id} SIGKILL`));
  });

  it('recovers a hold lost in a power loss from the record, and removes a hold whose create never got one', async () => {
    const kept = await h.service.create(SANDBOX, config());
    h.images.holds.delete(kept.id); // holds are written without fsync
    h.images.holds.add('c'.repeat(64)); // an interrupted create: a hold, no record
    const restarted = h.restart();
    await recoverContainers(restarted.service, restarted.options);
    assert.deepEqual(h.images.holders(), [kept.id]);
    assert.ok(h.images.calls.includes(`hold ${kept.id}`));
    assert.ok(h.images.calls.includes(`remove ${'c'.repeat(64)}`));
  });

  it('merges resource updates and refuses them for exited containers', async () => {
    const r = await h.service.create(SANDBOX, config({ linux: { resources: { cpuShares: 512n, memoryLimitInBytes: 1n << 26n } } }));
    await h.service.start(r.id);
    await h.service.updateResources(r.id, ContainerConfig.fromPartial({ linux: { resources: { cpuQuota: 20_000n, cpuPeriod: 100_000n } } }).linux!.resources);
    const update = h.runtime.calls.find((c) => c.startsWith('update'))!;
    assert.deepEqual(JSON.parse(update.slice(update.indexOf('{'))), { cpu: { period: 100000, quota: 20000, shares: 512 }, memory: { limit: 67108864, swap: 67108864 } });
    await h.service.handleExit({ id: r.id, exitCode: 1, finishedAtNs: 10n ** 19n });
    await rejectsKind(h.service.updateResources(r.id, undefined), 'FailedPrecondition', /EXITED/);
  });
});
