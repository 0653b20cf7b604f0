/** The sandbox service's rules over fakes: ordering, cleanup after failures, idempotency, exits, recovery. */
import assert from 'node:assert/strict';
import { access, mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { NamespaceMode, PodSandboxConfig, type DeepPartial } from '../../../src/gen/runtime/v1/api.js';
import { podSandboxStatus } from '../../../src/cri/pod-sandbox-status.js';
import { listPodSandbox } from '../../../src/cri/list-pod-sandbox.js';
import { ContainerConfig, LinuxContainerResources, PodSandboxState } from '../../../src/gen/runtime/v1/api.js';
import { rejectsKind } from '../oci/helpers.js';
import { eventually } from '../../helpers/wait.js';
import { boom, Harness } from './fakes.js';

const exists = (p: string) => access(p).then(() => true, () => false);

function pod(p: DeepPartial<PodSandboxConfig> = {}): PodSandboxConfig {
  return PodSandboxConfig.fromPartial({
    metadata: { name: 'web', namespace: 'shop', uid: 'uid-1', attempt: 0 },
    hostname: 'web-0',
    labels: { app: 'web' },
    annotations: { note: 'x' },
    ...p,
  });
}

describe('sandbox service', () => {
  let h: Harness;
  beforeEach(async () => {
    h = await Harness.create();
  });
  afterEach(async () => {
    await h.cleanup();
  });

  const status = (req: { podSandboxId: string; verbose: boolean }) => podSandboxStatus({ pods: h.pods, sandboxes: h.service, containersOf: () => [] }, req);

  /** Nothing of the sandbox is left anywhere the fakes can see. */
  async function assertNothingLeft(): Promise<void> {
    assert.deepEqual([...h.network.pins], [], 'netns pins');
    assert.deepEqual([...h.network.attached.keys()], [], 'CNI attachments');
    assert.deepEqual([...h.pause.containers.keys()], [], 'runtime containers');
    assert.deepEqual([...h.host.shm], [], 'shm mounts');
    assert.deepEqual(await readdir(h.stateRoot).catch(() => []), [], 'state dirs');
    assert.deepEqual(h.service.list(), [], 'records');
  }

  it('runs a pod: netns, CNI and pause, with the record written and namespaces recorded', async () => {
    const r = await h.runner.run(pod(), '');
    assert.equal(r.state, 'ready');
    assert.deepEqual(r.ips, ['10.9.0.2']);
    assert.equal(r.netnsPath, `/fake/netns/${r.id}`);
    assert.equal(r.name, 'web_shop_uid-1_0');
    assert.equal(r.cgroupParent, '/kubepods');
    assert.equal(r.cgroupsPath, `/kubepods/${r.id}`);
    assert.deepEqual(r.namespaces, {
      network: r.netnsPath,
      uts: `/proc/${r.pausePid}/ns/uts`,
      ipc: `/proc/${r.pausePid}/ns/ipc`,
      pid: `/proc/${r.pausePid}/ns/pid`,
    });
    assert.equal(r.files.shmPath, join(h.stateRoot, r.id, 'shm'));
    // The pause spec joined the pinned namespace, not the placeholder it was validated with.
    const spec = h.pause.containers.get(r.id)!.spec;
    assert.deepEqual(spec.linux!.namespaces!.find((n) => n.type === 'network'), { type: 'network', path: r.netnsPath });
    assert.ok(h.calls.indexOf(`network.createNetns ${r.id}`) < h.calls.indexOf(`pause.create ${r.id} `));
    // A restarted service reads the same record back.
    h.restart();
    await h.pods.recover();
    assert.deepEqual(h.service.get(r.id.slice(0, 8)), r);
  });

  it('validates before creating anything', async () => {
    await rejectsKind(h.runner.run(pod({ metadata: { name: 'web', namespace: 'shop' } }), ''), 'InvalidArgument', /config\.metadata\.uid is required/);
    await rejectsKind(h.runner.run(pod({ linux: { sysctls: { 'kernel.panic': '1' } } }), ''), 'InvalidArgument', /kernel\.panic.*not namespaced/);
    await rejectsKind(h.runner.run(pod(), 'kata'), 'NotFound', /no runtime for "kata"/);
    await rejectsKind(
      h.runner.run(pod({ portMappings: [{ containerPort: 0, hostPort: 8080 }] }), ''),
      'InvalidArgument',
      /config\.port_mappings\[0\]\.container_port/,
    );
    assert.deepEqual(h.calls, []);
    await assertNothingLeft();
  });

  it('refuses a second pod with the same metadata until the first is removed', async () => {
    const first = await h.runner.run(pod(), '');
    await rejectsKind(h.runner.run(pod(), ''), 'AlreadyExists', /reserved for/);
    await h.runner.run(pod({ metadata: { name: 'web', namespace: 'shop', uid: 'uid-1', attempt: 1 } }), '');
    await h.service.remove(first.id);
    await h.runner.run(pod(), '');
  });

  it('undoes everything when CNI fails, and releases the name', async () => {
    h.network.failSetup = boom('plugin type="bridge" (add)');
    await rejectsKind(h.runner.run(pod(), ''), 'Internal', /failed/);
    await assertNothingLeft();
    assert.ok(h.calls.some((c) => c.startsWith('pause.destroy')), 'the pause container started beside CNI is destroyed');
    h.network.failSetup = undefined;
    await h.runner.run(pod(), '');
  });

  it('undoes everything when the pause container fails to start, tearing the network down first', async () => {
    h.pause.failStart = boom('runc start');
    await rejectsKind(h.runner.run(pod(), ''), 'Internal', /^failed to start pause container for sandbox "[0-9a-f]{64}": runc start failed/);
    await assertNothingLeft();
    const teardown = h.calls.findIndex((c) => c.startsWith('network.teardown'));
    const unpin = h.calls.findIndex((c) => c.startsWith('network.removeNetns'));
    assert.ok(teardown >= 0 && teardown < unpin, 'CNI DEL before the pin goes');
  });

  it('undoes everything when the pod files fail', async () => {
    h.host.failFiles = boom('write hostname');
    await rejectsKind(h.runner.run(pod(), ''), 'Internal', /^failed to setup sandbox files for sandbox "[0-9a-f]{64}"/);
    // CNI ran beside the files (it needs only the netns) and was torn down again.
    await assertNothingLeft();
    assert.ok(!h.calls.some((c) => c.startsWith('pause.create')), 'the pause container never started');
  });

  it('runs host-network pods without netns or CNI; host IPC uses /dev/shm', async () => {
    const r = await h.runner.run(
      pod({ linux: { securityContext: { namespaceOptions: { network: NamespaceMode.NODE, ipc: NamespaceMode.NODE, pid: NamespaceMode.NODE } } } }),
      '',
    );
    assert.equal(r.netnsPath, '');
    assert.deepEqual(r.ips, []);
    assert.deepEqual(r.namespaces, {});
    assert.equal(r.files.shmPath, '/dev/shm');
    assert.ok(!h.calls.some((c) => c.startsWith('network.')));
    const types = h.pause.containers.get(r.id)!.spec.linux!.namespaces!.map((n) => n.type);
    assert.deepEqual(types, ['mount']);
  });

  it('lets the pause container of a user-namespace pod make the netns, then pins it and runs CNI on the pin', async () => {
    const userns = { mode: NamespaceMode.POD, uids: [{ hostId: 200000, containerId: 0, length: 65536 }], gids: [{ hostId: 200000, containerId: 0, length: 65536 }] };
    const sysctls = { 'net.ipv4.ip_local_port_range': '20000 30000', 'net.ipv4.conf.eth0.rp_filter': '2', 'kernel.shmmax': '1000000' };
    const r = await h.runner.run(pod({ linux: { sysctls, securityContext: { namespaceOptions: { usernsOptions: userns } } } }), '');
    const order = (call: string) => {
      const i = h.calls.indexOf(call);
      assert.ok(i >= 0, `${call} in ${h.calls.join(', ')}`);
      return i;
    };
    const pin = order(`network.pinNetns ${r.id} /proc/${r.pausePid}/ns/net`);
    assert.ok(!h.calls.some((c) => c.startsWith('network.createNetns')), 'no netns made by the host');
    assert.ok(order(`pause.create ${r.id} `) < pin, 'the pause container exists before its netns is pinned');
    assert.ok(pin < order(`network.setup ${r.id}`), 'CNI runs on the pin');
    // Only the sysctl naming the pod interface waits for CNI and is written from the host.
    const write = order(`host.writeNetnsSysctls ${r.netnsPath} {"net.ipv4.conf.eth0.rp_filter":"2"}`);
    assert.ok(order(`network.setup ${r.id}`) < write);
    const spec = h.pause.containers.get(r.id)!.spec;
    assert.deepEqual(spec.linux!.sysctl, { 'net.ipv4.ip_local_port_range': '20000 30000', 'net.ipv4.ip_unprivileged_port_start': '0', 'kernel.shmmax': '1000000' });
    assert.deepEqual(spec.linux!.namespaces!.find((n) => n.type === 'network'), { type: 'network' }, 'a new netns, no path');
    assert.deepEqual(r.userns, { uidMappings: [{ containerId: 0, hostId: 200000, size: 65536 }], gidMappings: [{ containerId: 0, hostId: 200000, size: 65536 }] });
    assert.equal(r.namespaces.user, `/proc/${r.pausePid}/ns/user`);
    assert.equal(r.namespaces.network, r.netnsPath);
    await h.service.stop(r.id);
    await h.service.remove(r.id);
    await assertNothingLeft();
  });

  it('undoes the pause container of a user-namespace pod whose CNI ADD fails', async () => {
    const userns = { mode: NamespaceMode.POD, uids: [{ hostId: 200000, containerId: 0, length: 65536 }], gids: [{ hostId: 200000, containerId: 0, length: 65536 }] };
    h.network.failSetup = boom('plugin type="bridge" failed (add)');
    await rejectsKind(h.runner.run(pod({ linux: { securityContext: { namespaceOptions: { usernsOptions: userns } } } }), ''), 'Internal', /bridge/);
    await assertNothingLeft();
    assert.ok(h.calls.some((c) => c.startsWith('network.removeNetns')), 'the pin goes');
  });

  it('runs the pause container after CNI when a sysctl names the pod interface', async () => {
    const r = await h.runner.run(pod({ linux: { sysctls: { 'net.ipv4.conf.eth0.rp_filter': '2' } } }), '');
    assert.ok(h.calls.indexOf(`network.setup ${r.id}`) < h.calls.indexOf(`pause.create ${r.id} `));
  });

  it('stops containers, then pause and network; stop and remove are idempotent', async () => {
    const r = await h.pods.run(pod(), 'crun');
    h.calls.length = 0;
    await h.pods.stop(r.id);
    assert.deepEqual(h.calls, [
      `containers.stopAll ${r.id} 0`,
      `pause.destroy ${r.id} crun`,
      `network.teardown ${r.id}`,
      `network.removeNetns ${r.netnsPath}`,
    ]);
    const stopped = h.service.get(r.id);
    assert.equal(stopped.state, 'notready');
    assert.deepEqual(stopped.ips, []);
    assert.equal(stopped.pausePid, 0);
    assert.equal(stopped.exit?.code, 137);
    await h.pods.stop(r.id);
    await h.pods.stop('ffff');
    await h.pods.remove(r.id);
    await h.pods.remove(r.id);
    await h.pods.remove('ffff');
    await assertNothingLeft();
    // Each event once, though the pod was stopped twice and removed twice.
    assert.deepEqual(
      h.events.published.map((e) => `${e.type} ${e.id}`),
      ['created', 'started', 'stopped', 'deleted'].map((t) => `${t} ${r.id}`),
    );
    await rejectsKind(status({ podSandboxId: r.id, verbose: false }), 'NotFound', /not found/);
  });

  it('removes a ready pod: its containers stopped, then the pod stopped, its containers removed, then its cgroups and the parents it created', async () => {
    h.host.missing = ['/stove/pod1', '/stove'];
    const r = await h.runner.run(pod({ linux: { cgroupParent: '/stove/pod1' } }), '');
    assert.deepEqual(r.createdCgroupParents, ['/stove/pod1', '/stove']);
    h.calls.length = 0;
    await h.pods.remove(r.id);
    assert.ok(h.calls.indexOf(`containers.stopAll ${r.id} 0`) < h.calls.indexOf(`pause.destroy ${r.id} `));
    assert.ok(h.calls.indexOf(`pause.destroy ${r.id} `) < h.calls.indexOf(`containers.removeAll ${r.id}`));
    assert.ok(h.calls.indexOf(`containers.removeAll ${r.id}`) < h.calls.indexOf('host.removePodFiles'));
    assert.deepEqual(
      h.calls.filter((c) => c.startsWith('host.remove')),
      ['host.removePodFiles', `host.removeCgroup /stove/pod1/${r.id}`, 'host.removeEmptyCgroup /stove/pod1', 'host.removeEmptyCgroup /stove'],
    );
    await assertNothingLeft();
  });

  it('keeps a pod whose containers cannot be stopped, and says why', async () => {
    const r = await h.runner.run(pod(), '');
    h.containers.fail = boom('stop container');
    await rejectsKind(h.pods.stop(r.id), 'Internal', new RegExp(`^failed to stop containers of sandbox "${r.id}"`));
    assert.equal(h.service.get(r.id).state, 'ready');
  });

  it('routes exits: a pause container\'s makes its pod NOTREADY and publishes STOPPED once, others go to the containers', async () => {
    const r = await h.pods.run(pod(), '');
    await h.pods.routeExit({ id: 'c'.repeat(64), exitCode: 0, finishedAtNs: 1n });
    assert.ok(h.calls.includes(`containers.handleExit ${'c'.repeat(64)}`));
    assert.equal(h.service.get(r.id).state, 'ready');
    await h.pods.routeExit(h.pause.kill(r.id, 137));
    assert.equal(h.service.get(r.id).state, 'notready');
    assert.ok(!h.calls.includes(`containers.handleExit ${r.id}`));
    // The stop that follows reports no second STOPPED.
    await h.pods.stop(r.id);
    assert.deepEqual(
      h.events.published.map((e) => e.type),
      ['created', 'started', 'stopped'],
    );
  });

  it('marks a pod NOTREADY when its pause process exits', async () => {
    const r = await h.runner.run(pod(), '');
    const other = await h.service.notePauseExit('c'.repeat(64), { id: 'c'.repeat(64), exitCode: 0, finishedAtNs: 1n });
    assert.equal(other, false, 'not a sandbox');
    const stale = await h.service.notePauseExit(r.id, { id: r.id, exitCode: 1, finishedAtNs: 1n });
    assert.equal(stale, false, 'an exit record of a pause process that still runs is stale');
    assert.equal(await h.service.notePauseExit(r.id, h.pause.kill(r.id, 137)), true);
    assert.equal(await h.service.notePauseExit(r.id), false, 'once');
    const after = h.service.get(r.id);
    assert.equal(after.state, 'notready');
    assert.equal(after.exit?.code, 137);
    // Stopping still tears the network down and deletes the runtime's container.
    await h.service.stop(r.id);
    assert.deepEqual([...h.network.pins], []);
    assert.deepEqual([...h.pause.containers.keys()], []);
  });

  it('notices in PodSandboxStatus a pause process that died without an exit record', async () => {
    const r = await h.runner.run(pod(), '');
    h.pause.kill(r.id, 137);
    h.pause.exits.delete(r.id);
    const st = await status({ podSandboxId: r.id, verbose: false });
    assert.equal(st.status!.state, PodSandboxState.SANDBOX_NOTREADY);
    assert.equal(h.service.get(r.id).state, 'notready');
    assert.equal(h.service.get(r.id).exit?.code, 255, 'no exit record: the code is unknown');
    assert.deepEqual(
      h.events.published.map((e) => e.type),
      ['stopped'],
      'the subscribers learn of it as of an exit file',
    );
  });

  it('runs the changes of one pod one at a time under the pod lifecycle\'s lock, and other pods beside them', async () => {
    const a = await h.pods.run(pod({ linux: { cgroupParent: '/kubepods/pod-a' } }), '');
    const b = await h.pods.run(pod({ metadata: { name: 'db', namespace: 'shop', uid: 'uid-2' } }), '');
    const held = h.host.holdCgroupWrites();
    const resize = h.pods.updateResources(a.id, undefined, LinuxContainerResources.fromPartial({ cpuShares: 512n }));
    await eventually('the resize writing the cgroup', () => h.calls.includes('host.writeCgroupLimits'));
    const stopA = h.pods.stop(a.id);
    const exitA = h.pods.routeExit(h.pause.kill(a.id, 1));
    // The other pod is not held up by this one's lock.
    await h.pods.stop(b.id);
    assert.ok(!h.calls.includes(`containers.stopAll ${a.id} 0`), 'the stop waits for the resize');
    held.release();
    await Promise.all([resize, stopA, exitA]);
    const at = (call: string) => h.calls.findIndex((c) => c.startsWith(call));
    assert.ok(at('host.writeCgroupLimits') < at(`containers.stopAll ${a.id} 0`), h.calls.join('\n'));
    assert.ok(at(`containers.stopAll ${a.id} 0`) < at(`pause.destroy ${a.id} `), h.calls.join('\n'));
    // The exit came in while the stop ran: it changes nothing after it, and STOPPED goes out once.
    assert.equal(h.service.get(a.id).state, 'notready');
    assert.deepEqual(
      h.events.published.filter((e) => e.id === a.id).map((e) => e.type),
      ['created', 'started', 'stopped'],
    );
  });

  it('creates a container under the pod\'s lock: a RemovePodSandbox waits for it and then removes it', async () => {
    const r = await h.pods.run(pod(), '');
    let release!: () => void;
    h.containers.createHeld = new Promise<void>((resolve) => (release = resolve));
    const create = h.pods.createContainer(r.id.slice(0, 12), ContainerConfig.fromPartial({}));
    await eventually('the create to begin', () => h.calls.includes(`containers.create ${r.id}`));
    const remove = h.pods.remove(r.id);
    // Another pod's stop goes by meanwhile: enough turns for an unlocked remove to have begun.
    const other = await h.pods.run(pod({ metadata: { name: 'db', namespace: 'shop', uid: 'uid-2' } }), '');
    await h.pods.stop(other.id);
    assert.ok(!h.calls.includes(`containers.stopAll ${r.id} 0`), 'the remove waits for the create');
    release();
    await Promise.all([create, remove]);
    const at = (call: string) => h.calls.indexOf(call);
    assert.ok(at(`containers.created ${r.id}`) < at(`containers.stopAll ${r.id} 0`), h.calls.join('\n'));
    assert.ok(at(`containers.stopAll ${r.id} 0`) < at(`containers.removeAll ${r.id}`), h.calls.join('\n'));
    // An unknown pod: the container service answers (NotFound in its words), no lock needed.
    await h.pods.createContainer('ffff', ContainerConfig.fromPartial({}));
    assert.ok(h.calls.includes('containers.create ffff'));
  });

  it('starts a container only in a ready pod, under the pod\'s lock', async () => {
    const r = await h.pods.run(pod(), '');
    const first = await h.pods.createContainer(r.id, ContainerConfig.fromPartial({}));
    const second = await h.pods.createContainer(r.id, ContainerConfig.fromPartial({}));
    await h.pods.startContainer(first.id.slice(0, 12));
    assert.ok(h.calls.includes(`containers.start ${first.id}`));
    await h.pods.stop(r.id);
    await rejectsKind(h.pods.startContainer(second.id), 'FailedPrecondition', new RegExp(`sandbox "${r.id}" is not ready`));
    assert.ok(!h.calls.includes(`containers.start ${second.id}`), 'a stopped pod starts nothing');
    await rejectsKind(h.pods.startContainer('ffff'), 'NotFound', /not found/);
  });

  it('recovers: a pause that died while down makes the pod NOTREADY; leftovers of an interrupted run go', async () => {
    const alive = await h.runner.run(pod(), '');
    const dead = await h.runner.run(pod({ metadata: { name: 'db', namespace: 'shop', uid: 'uid-2' } }), '');
    h.pause.kill(dead.id, 9);
    // An interrupted RunPodSandbox: a state dir, a pin, an attachment and a runtime container, no record.
    const orphan = 'e'.repeat(64);
    await mkdir(join(h.stateRoot, orphan), { recursive: true });
    h.network.pins.add(`/fake/netns/${orphan}`);
    h.network.attached.set(orphan, ['10.9.0.99']);
    h.pause.containers.set(orphan, { pid: 99, alive: true, spec: {} as never });

    h.restart();
    await h.pods.recover();
    assert.equal(h.service.get(alive.id).state, 'ready');
    assert.equal(h.service.get(dead.id).state, 'notready');
    assert.equal(h.service.get(dead.id).exit?.code, 9);
    assert.equal(await exists(join(h.stateRoot, orphan)), false);
    assert.equal(h.network.pins.has(`/fake/netns/${orphan}`), false);
    assert.equal(h.network.attached.has(orphan), false);
    assert.equal(h.pause.containers.has(orphan), false);
    await rejectsKind(h.runner.run(pod(), ''), 'AlreadyExists', /reserved/);
  });

  it('answers PodSandboxStatus and ListPodSandbox with filters', async () => {
    const a = await h.runner.run(pod(), '');
    const b = await h.runner.run(pod({ metadata: { name: 'db', namespace: 'shop', uid: 'uid-2' }, labels: { app: 'db', tier: 'data' } }), 'crun');
    await h.service.stop(b.id);

    const st = await status({ podSandboxId: a.id.slice(0, 10), verbose: true });
    assert.equal(st.status!.id, a.id);
    assert.equal(st.status!.state, PodSandboxState.SANDBOX_READY);
    assert.equal(st.status!.createdAt, a.createdAt);
    assert.equal(st.status!.network!.ip, '10.9.0.2');
    assert.deepEqual(st.status!.labels, { app: 'web' });
    assert.deepEqual(st.status!.annotations, { note: 'x' });
    assert.equal(st.status!.metadata!.uid, 'uid-1');
    const info = JSON.parse(st.info.info!) as { pid: number; netnsPath: string; processStatus: string };
    assert.equal(info.pid, a.pausePid);
    assert.equal(info.netnsPath, a.netnsPath);
    assert.equal(info.processStatus, 'running');
    await rejectsKind(status({ podSandboxId: '', verbose: false }), 'InvalidArgument', /pod_sandbox_id/);

    // A verbose status looks at the pause process at most once: a READY pod's check serves both the
    // liveness reconciliation and processStatus; a stopped pod's pause is deleted, nothing to look at.
    for (const [p, processStatus, looks] of [[a, 'running', 1], [b, 'deleted', 0]] as const) {
      const before = h.pause.aliveChecks;
      const verbose = JSON.parse((await status({ podSandboxId: p.id, verbose: true })).info.info!) as { processStatus: string };
      assert.equal(verbose.processStatus, processStatus);
      assert.equal(h.pause.aliveChecks - before, looks, `pause checks for the ${processStatus} pod`);
    }

    const ids = async (filter: object | undefined) => (await listPodSandbox(h.service, { filter: filter as never })).items.map((i) => i.id);
    assert.deepEqual(await ids(undefined), [a.id, b.id]);
    assert.deepEqual(await ids({ id: b.id.slice(0, 6), labelSelector: {} }), [b.id]);
    assert.deepEqual(await ids({ id: 'zzz', labelSelector: {} }), []);
    assert.deepEqual(await ids({ id: '', state: { state: PodSandboxState.SANDBOX_NOTREADY }, labelSelector: {} }), [b.id]);
    assert.deepEqual(await ids({ id: '', labelSelector: { app: 'db', tier: 'data' } }), [b.id]);
    assert.deepEqual(await ids({ id: '', labelSelector: { app: 'db', tier: 'web' } }), []);
    const listed = (await listPodSandbox(h.service, { filter: undefined })).items[1]!;
    assert.equal(listed.runtimeHandler, 'crun');
  });
});
