/**
 * The NRI adjustments that go to the OCI runtime as they are, in real containers: the v0.12.3-stub
 * plugin (plugin-v012/main.go, pre-launched) sets an I/O priority, a scheduling policy, a network device
 * and RDT settings as pod annotations ask. Two runtime handlers side by side: runc 1.5
 * (test/e2e/runc/build.sh) and Debian's runc 1.1.5.
 *
 * - runc 1.5: the container's process has the I/O priority (`ionice -p`) and the policy and nice value
 *   (`chrt -p`, /proc/<pid>/stat) the plugin asked; the host end of a veth pair whose peer sits in a
 *   network namespace the test made is in the container under its new name, gone from the host, and
 *   destroyed with the pod's network namespace (its peer goes too); later events show plugins what was
 *   set. RDT (settings, and a class, which is the resctrl group as on containerd 2.4 and CRI-O 1.36):
 *   this machine has no resctrl, so the create is refused saying so.
 * - runc 1.1.5: each of the four is refused with FAILED_PRECONDITION naming the plugin, the field and
 *   the runtime; nothing is left and the interface stays on the host.
 * - A hostile value (I/O level 9) is INVALID_ARGUMENT before any runtime is asked.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { runc15Path } from '../../helpers/oci-runtime.js';
import { readMountInfo } from '../../../src/platform/proc.js';
import { suiteHooks } from '../../helpers/suite.js';
import { ContainerWorld, eventually, rejectsWith, skipReason as worldSkipReason } from '../container/world.js';
import { installRecorder, nriTestDir, nriToml } from './config.js';

const PLUGIN = process.env.NRI_V012_PLUGIN ?? '/var/cache/stove-e2e/nri-v012/stove-nri-v012-plugin';
const RUNC11 = '/usr/bin/runc';

function skipReason(): string | undefined {
  if (!existsSync(PLUGIN)) return `the NRI v0.12 test plugin is not at ${PLUGIN} (build it with test/integration/nri/plugin-v012/build-plugin.sh, or set NRI_V012_PLUGIN)`;
  if (!runc15Path()) return 'runc 1.5 is not built (test/e2e/runc/build.sh, or set STOVE_RUNC15)';
  if (!existsSync(RUNC11)) return `no runc at ${RUNC11}`;
  return worldSkipReason();
}

interface Line {
  plugin: string;
  event: string;
  container?: string;
  ioPriority?: string;
  scheduler?: string;
  netDevices?: Record<string, string>;
}

const ip = (...args: string[]) => execa('ip', args, { reject: false });

describe('NRI I/O priority, scheduler, network device and RDT adjustments (runc 1.5 and 1.1.5)', function () {
  this.timeout(120_000);
  const world = new ContainerWorld();
  let dir = '';
  const logFile = () => join(dir, 'plugin.jsonl');
  const roots = () => [join(dir, 'runc15'), join(dir, 'runc11')];
  // A network namespace of the test's own holding the peer of the veth pair the plugin moves.
  const tag = world.pods.tag;
  const netns = `stvnri-${tag}`;
  const hostEnd = `stvn${tag}a`;
  const peer = `stvn${tag}b`;

  async function makeVeth(): Promise<void> {
    await execa('ip', ['netns', 'add', netns]);
    await execa('ip', ['link', 'add', hostEnd, 'type', 'veth', 'peer', 'name', peer, 'netns', netns]);
  }
  const onHost = async () => (await ip('link', 'show', hostEnd)).exitCode === 0;
  const peerThere = async () => (await ip('-n', netns, 'link', 'show', peer)).exitCode === 0;

  suiteHooks({
    what: 'NRI runtime-field integration tests',
    skipReason,
    setup: async () => {
      dir = await nriTestDir('stove-nri-fields-');
      await installRecorder(dir, PLUGIN, logFile());
      world.pods.extraToml = [
        ...nriToml(dir, { registration: '5s', request: '2s' }),
        '[runtime.handlers.runc15]',
        `path = "${runc15Path()}"`,
        `root = "${roots()[0]}"`,
        '[runtime.handlers.runc11]',
        `path = "${RUNC11}"`,
        `root = "${roots()[1]}"`,
      ];
      await world.start();
      await eventually('the plugin to be synchronized', async () => (await lines()).some((l) => l.event === 'Synchronize'));
    },
    tidy: async () => {
      await world.removeAll().catch(() => {});
      await ip('link', 'del', hostEnd);
      await ip('netns', 'del', netns);
    },
    leftovers: async () => {
      const out = await world.leftovers();
      for (const [root, binary] of [[roots()[0]!, runc15Path()!], [roots()[1]!, RUNC11]]) {
        const r = await execa(binary, ['--root', root, 'list', '-q'], { reject: false });
        if (r.stdout.trim()) out.push(`containers in ${root}: ${r.stdout.trim().split('\n').join(' ')}`);
      }
      return out;
    },
    cleanup: async () => {
      await world.cleanup();
      for (const [root, binary] of [[roots()[0]!, runc15Path()!], [roots()[1]!, RUNC11]]) {
        await execa('sh', ['-c', `for c in $(${binary} --root ${root} list -q); do ${binary} --root ${root} delete -f $c; done`], { reject: false });
      }
      await ip('link', 'del', hostEnd);
      await ip('netns', 'del', netns);
      if (dir) await rm(dir, { recursive: true, force: true });
    },
  });

  afterEach(function () {
    if (this.currentTest?.state === 'failed') process.stderr.write(world.daemon.output().split('\n').filter((l) => /nri|NRI|error/.test(l)).slice(-30).join('\n') + '\n');
  });

  async function lines(): Promise<Line[]> {
    const text = await readFile(logFile(), 'utf8').catch(() => '');
    return text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Line);
  }

  const annotations = (name: string, a: Record<string, string>) => Object.fromEntries(Object.entries(a).map(([k, v]) => [`nri.stove.test/${k}.container.${name}`, v]));
  const create = (pod: { id: string; config: never }, name: string) =>
    world.daemon.clients.runtime.createContainer({ podSandboxId: pod.id, config: world.config('sleeper', { metadata: { name, attempt: 0 } }), sandboxConfig: pod.config });

  it('runc 1.5: the process gets the I/O priority and scheduling policy, the interface moves in and goes with the pod', async () => {
    await makeVeth();
    const config = world.pods.pod({ annotations: annotations('tuned', { ioprio: 'IOPRIO_CLASS_BE:6', sched: 'SCHED_BATCH:7:0', netdev: `${hostEnd}=net1` }) });
    const podId = await world.pods.run(config, 'runc15');
    const id = await world.run({ id: podId, config }, world.config('sleeper', { metadata: { name: 'tuned', attempt: 0 } }));
    const { pid, runtimeSpec } = await world.info(id);
    assert.deepEqual(runtimeSpec.process.ioPriority, { class: 'IOPRIO_CLASS_BE', priority: 6 });
    assert.deepEqual(runtimeSpec.process.scheduler, { policy: 'SCHED_BATCH', nice: 7 });
    assert.deepEqual(runtimeSpec.linux.netDevices, { [hostEnd]: { name: 'net1' } });
    // The container's process, seen from the host.
    assert.equal((await execa('ionice', ['-p', String(pid)])).stdout.trim(), 'best-effort: prio 6');
    assert.match((await execa('chrt', ['-p', String(pid)])).stdout, /scheduling policy: SCHED_BATCH\n.*scheduling priority: 0/);
    const stat = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
    assert.equal(stat[16], '7', 'nice 7 (field 19 of /proc/<pid>/stat)');
    // The interface is in the container (its network namespace is the pod's) and no longer on the host.
    const inside = (await world.exec(id, ['ls', '/sys/class/net'])).stdout.split(/\s+/);
    assert.ok(inside.includes('net1'), `net1 in the container: ${inside.join(' ')}`);
    assert.equal(await onHost(), false, 'the host end left the host');
    assert.equal(await peerThere(), true);
    // Later events show plugins what the spec has.
    await eventually('PostStartContainer to reach the plugin', async () => (await lines()).some((l) => l.container === id && l.event === 'PostStartContainer'));
    const started = (await lines()).find((l) => l.container === id && l.event === 'PostStartContainer')!;
    assert.equal(started.ioPriority, 'IOPRIO_CLASS_BE:6');
    assert.equal(started.scheduler, 'SCHED_BATCH:7:0');
    assert.deepEqual(started.netDevices, { [hostEnd]: 'net1' });
    // The interface belongs to the pod's network namespace (runtime-spec: the runtime does not move it
    // back); it is destroyed with it, and its veth peer with it.
    const rt = world.daemon.clients.runtime;
    await rt.stopContainer({ containerId: id, timeout: 0n });
    await rt.removeContainer({ containerId: id });
    assert.equal(await peerThere(), true, 'the pod still holds the interface');
    await rt.stopPodSandbox({ podSandboxId: podId });
    await rt.removePodSandbox({ podSandboxId: podId });
    await eventually('the veth pair to go with the pod network namespace', async () => !(await peerThere()));
    assert.equal(await onHost(), false);
  });

  it('runc 1.5: RDT settings are refused on a host without resctrl, naming it', async function () {
    if ((await readMountInfo()).some((m) => m.fsType === 'resctrl')) this.skip(); // a host with resctrl: not this test's to change
    const config = world.pods.pod({
      annotations: {
        ...annotations('rdt', { rdt: JSON.stringify({ closId: 'stove-test', schemata: ['L3:0=1'], enableMonitoring: true }) }),
        ...annotations('cls', { rdt: JSON.stringify({ class: 'gold' }) }),
      },
    });
    const pod = { id: await world.pods.run(config, 'runc15'), config: config as never };
    await rejectsWith(create(pod, 'rdt'), 'FAILED_PRECONDITION', /NRI plugins set RDT settings \(closID "stove-test", 1 schemata line\(s\), monitoring on\), which need the resctrl filesystem \(\/sys\/fs\/resctrl\), and this host has none mounted/);
    await rejectsWith(create(pod, 'cls'), 'FAILED_PRECONDITION', /NRI plugins set RDT settings \(class "gold"\), which need the resctrl filesystem/);
    assert.equal((await world.daemon.clients.runtime.listContainers({ filter: { podSandboxId: pod.id, id: '', state: undefined, labelSelector: {} } })).containers.length, 0);
  });

  it("runc 1.1.5: each is refused naming the plugin, the field and the runtime; nothing is left, the interface stays on the host", async () => {
    await makeVeth();
    const config = world.pods.pod({
      annotations: {
        ...annotations('io', { ioprio: 'IOPRIO_CLASS_BE:6' }),
        ...annotations('sched', { sched: 'SCHED_BATCH:7:0' }),
        ...annotations('net', { netdev: `${hostEnd}=net1` }),
        ...annotations('rdt', { rdt: JSON.stringify({ closId: 'stove-test' }) }),
        ...annotations('cls', { rdt: JSON.stringify({ class: 'gold' }) }),
        ...annotations('bad', { ioprio: 'IOPRIO_CLASS_BE:9' }),
      },
    });
    const pod = { id: await world.pods.run(config, 'runc11'), config: config as never };
    const old = `which the OCI runtime ${RUNC11} does not`;
    await rejectsWith(create(pod, 'io'), 'FAILED_PRECONDITION', new RegExp(`NRI: plugin "10-recorder" asked for an I/O priority \\(IOPRIO_CLASS_BE 6, process\\.ioPriority\\), ${old} \\(its "features" gives ociVersionMax 1\\.0\\.2-dev`));
    await rejectsWith(create(pod, 'sched'), 'FAILED_PRECONDITION', new RegExp(`plugin "10-recorder" asked for a scheduling policy \\(SCHED_BATCH nice 7, process\\.scheduler\\), ${old}`));
    await rejectsWith(create(pod, 'net'), 'FAILED_PRECONDITION', new RegExp(`plugin "10-recorder" asked for network device "${hostEnd}" as "net1" \\(linux\\.netDevices\\), ${old} \\(its "features" lists no linux\\.netDevices`));
    await rejectsWith(create(pod, 'rdt'), 'FAILED_PRECONDITION', new RegExp(`plugin "10-recorder" asked for RDT settings \\(closID "stove-test", linux\\.intelRdt\\), ${old} \\(its "features" lists no linux\\.intelRdt`));
    await rejectsWith(create(pod, 'cls'), 'FAILED_PRECONDITION', new RegExp(`plugin "10-recorder" asked for RDT class "gold" \\(linux\\.intelRdt\\.closID\\), ${old}`));
    await rejectsWith(create(pod, 'bad'), 'INVALID_ARGUMENT', /plugin "10-recorder" asked for an invalid I\/O priority \(linux\.io_priority\): priority 9 is outside 0 \(highest\) to 7 \(lowest\)/);
    assert.equal((await world.daemon.clients.runtime.listContainers({ filter: { podSandboxId: pod.id, id: '', state: undefined, labelSelector: {} } })).containers.length, 0);
    assert.equal(await onHost(), true, 'the interface was not moved');
    // A container without these adjustments runs on the same runtime.
    const id = await world.run(pod as never, world.config('sleeper', { metadata: { name: 'plain', attempt: 0 } }));
    assert.equal((await world.exec(id, ['echo', 'ok'])).stdout.trim(), 'ok');
  });
});
