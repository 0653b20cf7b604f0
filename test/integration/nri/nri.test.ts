/**
 * NRI against a real `stove serve` with real runc containers: plugins written here speak the protocol
 * over the daemon's NRI socket (external) or over a socketpair Stove starts them with (pre-launched),
 * and every adjustment is checked from inside a running container.
 */
import assert from 'node:assert/strict';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { ContainerUpdate, CreateContainerResponse, UpdateContainerResponse, type ContainerAdjustment, type DeepPartial } from '../../../src/gen/nri/api.js';
import { UpdateContainerResourcesRequest } from '../../../src/gen/runtime/v1/api.js';
import { detectCgroups } from '../../../src/platform/cgroups.js';
import { suiteHooks } from '../../helpers/suite.js';
import { TestPlugin } from '../../helpers/nri-plugin.js';
import { REPO_ROOT, runStoveCli } from '../../helpers/stove-process.js';
import { ContainerWorld, eventually, rejectsWith, skipReason } from '../container/world.js';
import { nriTestDir, nriToml } from './config.js';

interface StatusFile {
  plugins: { name: string; index: string; kind: string; pid?: number }[];
}

describe('NRI plugins (real daemon, runc, conmon)', function () {
  this.timeout(120_000);
  const world = new ContainerWorld();
  let dir = '';
  let plugins: TestPlugin[] = [];
  const socket = () => join(dir, 'nri.sock');

  suiteHooks({
    what: 'NRI integration tests',
    skipReason,
    setup: async () => {
      dir = await nriTestDir('stove-nri-it-');
      await mkdir(join(dir, 'conf.d'));
      // Two pre-launched plugins: a recorder that adds an env var to every container, and a victim that
      // SIGKILLs itself when asked to create a container named kill-me.
      const launcher = `#!/bin/sh\nexec ${process.execPath} ${join(REPO_ROOT, 'dist/test/helpers/nri-plugin-main.js')}\n`;
      for (const name of ['05-recorder', '06-victim']) await writeFile(join(dir, 'plugins', name), launcher, { mode: 0o755 });
      await writeFile(join(dir, 'conf.d', 'recorder.conf'), JSON.stringify({ log: join(dir, 'recorder.jsonl'), env: { PRELAUNCHED: 'yes' } }));
      await writeFile(join(dir, 'conf.d', '06-victim.conf'), JSON.stringify({ log: join(dir, 'victim.jsonl'), killOn: 'kill-me' }));
      // A CDI spec for the plugins to ask for by name.
      await mkdir(join(dir, 'cdi'));
      const cdiSpec = {
        cdiVersion: '0.6.0',
        kind: 'nri.stove.test/dev',
        devices: [{ name: 'zero', containerEdits: { env: ['CDI_INJECTED=1'], deviceNodes: [{ path: '/dev/cdi-zero', hostPath: '/dev/zero' }] } }],
      };
      await writeFile(join(dir, 'cdi', 'nri-test.json'), JSON.stringify(cdiSpec));
      world.pods.extraToml = [
        '[cdi]',
        `spec_dirs = ["${join(dir, 'cdi')}"]`,
        ...nriToml(dir, { registration: '3s', request: '1s' }),
      ];
      await world.start();
    },
    tidy: async () => {
      for (const p of plugins) p.close();
      plugins = [];
      await world.removeAll().catch(() => {});
    },
    leftovers: () => world.leftovers(),
    cleanup: async () => {
      await world.cleanup();
      if (dir) await rm(dir, { recursive: true, force: true });
    },
  });

  async function status(): Promise<StatusFile> {
    return JSON.parse(await readFile(join(world.daemon.state, 'nri-plugins.json'), 'utf8')) as StatusFile;
  }

  /** Connects an external plugin and waits until the daemon calls it for events. */
  async function connect(name: string, index: string): Promise<TestPlugin> {
    const p = await TestPlugin.connect(socket(), { name: `${name}-${randomBytes(2).toString('hex')}`, index });
    plugins.push(p);
    const full = (p as unknown as { o: { name: string } }).o.name;
    await eventually(`plugin ${full} to be synchronized`, async () => (await status()).plugins.some((x) => x.name === full));
    return p;
  }

  const sh = async (id: string, script: string) => (await world.exec(id, ['sh', '-c', script])).stdout.trim();
  const adjusting = (adjust: DeepPartial<ContainerAdjustment>) => () => CreateContainerResponse.fromPartial({ adjust });

  it('pre-launches the plugins in plugin_path with their config, and stove check lists them', async () => {
    const recorded = (await readFile(join(dir, 'recorder.jsonl'), 'utf8')).trim().split('\n').map((l) => JSON.parse(l) as { event: string; runtime?: string });
    assert.deepEqual(recorded.slice(0, 2).map((e) => e.event), ['Configure', 'Synchronize']);
    assert.equal(recorded[0].runtime, 'stove');
    const listed = await status();
    assert.deepEqual(
      listed.plugins.filter((p) => p.kind === 'pre-launched').map((p) => `${p.index}-${p.name}`),
      ['05-recorder', '06-victim'].filter((n) => n !== '06-victim' || listed.plugins.some((p) => p.name === 'victim')),
    );
    const check = await runStoveCli(['check', '--config', world.daemon.configPath, '--state', world.daemon.state]);
    assert.match(check.stdout, /nri\s+.*pre-launched in .*plugins: 05-recorder, 06-victim; connected: .*05-recorder \(pre-launched, pid \d+\)/);

    const pod = await world.pod();
    const id = await world.run(pod, world.config('sleeper'));
    assert.equal(await sh(id, 'echo $PRELAUNCHED'), 'yes', 'the pre-launched plugin adjusted the container');
  });

  it('synchronizes a newly connected plugin with the pods and containers that exist', async () => {
    const pod = await world.pod();
    const id = await world.run(pod, world.config('sleeper', { labels: { app: 'sync' } }));
    const p = await connect('sync', '10');
    const sync = p.syncs.at(-1)!;
    assert.ok(sync.pods.some((x) => x.id === pod.id && x.uid === pod.config.metadata!.uid && x.ips.length === 1));
    const c = sync.containers.find((x) => x.id === id);
    assert.ok(c, 'the container is in the sync');
    assert.equal(c.state, 3, 'CONTAINER_RUNNING');
    assert.equal(c.labels.app, 'sync');
    assert.deepEqual(c.args, ['sleep', '3600']);
    assert.ok(c.env.includes('PRELAUNCHED=yes'));
    assert.ok(c.pid > 0);
  });

  it('after a restart, relaunches the pre-launched plugins and describes recovered containers in full', async () => {
    const pod = await world.pod();
    const id = await world.run(pod, world.config('sleeper'));
    const before = (await status()).plugins.find((p) => p.name === 'recorder')!.pid;
    await world.pods.restart('SIGKILL');
    const after = (await status()).plugins.find((p) => p.name === 'recorder')?.pid;
    assert.ok(after && after !== before, `recorder relaunched (pid ${before} → ${after})`);
    const p = await connect('after-restart', '10');
    const c = p.syncs.at(-1)!.containers.find((x) => x.id === id);
    assert.deepEqual(c?.args, ['sleep', '3600'], 'the recovered container is described from its spec');
    assert.equal(c?.state, 3);
    const second = await world.run(pod, world.config('sleeper'));
    assert.equal(await sh(second, 'echo $PRELAUNCHED'), 'yes', 'the relaunched plugin adjusts new containers');
  });

  it('relays every pod and container event in order', async () => {
    const p = await connect('events', '10');
    const rt = world.daemon.clients.runtime;
    const pod = await world.pod({ linux: { overhead: { cpuShares: 64n }, resources: { memoryLimitInBytes: 256n << 20n } } });
    const id = await world.run(pod, world.config('sleeper'));
    await rt.updateContainerResources(UpdateContainerResourcesRequest.fromPartial({ containerId: id, linux: { cpuShares: 256n } }));
    await rt.stopContainer({ containerId: id, timeout: 0n });
    await rt.removeContainer({ containerId: id });
    await rt.stopPodSandbox({ podSandboxId: pod.id });
    await rt.removePodSandbox({ podSandboxId: pod.id });
    const containerEvents = ['CreateContainer', 'PostCreateContainer', 'StartContainer', 'PostStartContainer', 'UpdateContainer', 'PostUpdateContainer', 'StopContainer', 'RemoveContainer'];
    await eventually('every container event', async () => p.eventsFor(id).length >= containerEvents.length);
    assert.deepEqual(p.eventsFor(id), containerEvents);
    await eventually('every pod event', async () => p.eventsFor(pod.id).length >= 3);
    assert.deepEqual(p.eventsFor(pod.id), ['RunPodSandbox', 'StopPodSandbox', 'RemovePodSandbox']);
    const create = p.creates.find((c) => c.container?.id === id)!;
    assert.equal(create.pod?.id, pod.id);
    assert.equal(create.pod?.namespace, 'stove-it');
    assert.equal(create.pod?.linux?.podOverhead?.cpu?.shares?.value, 64n);
    assert.equal(create.pod?.linux?.podResources?.memory?.limit?.value, 256n << 20n);
    assert.deepEqual(create.container?.args, ['sleep', '3600']);
  });

  it('applies every kind of adjustment to a real container', async () => {
    const layout = await detectCgroups();
    const hostDir = join(dir, 'shared-in');
    await mkdir(hostDir, { recursive: true });
    await writeFile(join(hostDir, 'hello'), 'from the host\n');
    const cgroupsPath = `${world.pods.cgroupRoot}/nri-custom-${randomBytes(3).toString('hex')}`;
    const hookMark = join(dir, `hook-${randomBytes(3).toString('hex')}`);
    const p = await connect('adjuster', '10');
    p.onCreate = adjusting({
      annotations: { 'nri.stove.test/added': 'yes', '-io.kubernetes.cri.image-name': '' },
      env: [{ key: 'NRI_ENV', value: 'set' }, { key: '-HOSTNAME', value: '' }],
      mounts: [{ destination: '/nri-mount', type: 'bind', source: hostDir, options: ['rbind', 'ro'] }],
      hooks: { createRuntime: [{ path: '/bin/sh', args: ['sh', '-c', `echo hooked > ${hookMark}`] }] },
      linux: {
        devices: [{ path: '/dev/nri-zero', type: 'c', major: 1n, minor: 5n, fileMode: { value: 0o666 } }],
        resources: {
          memory: { limit: { value: 96n << 20n } },
          cpu: { shares: { value: 300n }, cpus: '0' },
          pids: { limit: 77n },
          blockioClass: { value: 'slowdisk' },
        },
        cgroupsPath,
        oomScoreAdj: { value: 432n },
      },
      rlimits: [{ type: 'RLIMIT_NOFILE', soft: 1234n, hard: 2345n }],
      CDIDevices: [{ name: 'nri.stove.test/dev=zero' }],
    });
    const pod = await world.pod();
    const id = await world.run(pod, world.config('sleeper'));
    // The container's process (the pod's pause process may be pid 1 of a shared pid namespace).
    const proc = '/proc/$(pidof sleep)';
    const initEnv = (await sh(id, `tr '\\0' '\\n' < ${proc}/environ`)).split('\n');
    assert.ok(initEnv.includes('NRI_ENV=set') && initEnv.includes('PRELAUNCHED=yes'), initEnv.join(' '));
    assert.ok(!initEnv.some((e) => e.startsWith('HOSTNAME=')), 'the plugin removed HOSTNAME');
    assert.ok(initEnv.includes('CDI_INJECTED=1'), 'the CDI device named by the plugin was injected');
    assert.equal(await sh(id, 'dd if=/dev/cdi-zero bs=1 count=2 2>/dev/null | wc -c'), '2');
    assert.equal(await sh(id, 'cat /nri-mount/hello; touch /nri-mount/x 2>/dev/null || echo read-only'), 'from the host\nread-only');
    assert.equal((await readFile(hookMark, 'utf8')).trim(), 'hooked');
    assert.equal(await sh(id, 'dd if=/dev/nri-zero bs=1 count=3 2>/dev/null | wc -c'), '3');
    assert.equal(await sh(id, `cat ${proc}/oom_score_adj`), '432');
    assert.match(await sh(id, `cat ${proc}/limits`), /Max open files\s+1234\s+2345/);
    assert.ok((await sh(id, `cat ${proc}/cgroup`)).includes(cgroupsPath), 'the container runs in the cgroups path the plugin chose');
    if (layout.version === 1) {
      assert.equal(await sh(id, 'cat /sys/fs/cgroup/memory/memory.limit_in_bytes'), String(96 << 20));
      assert.equal(await sh(id, 'cat /sys/fs/cgroup/cpu/cpu.shares'), '300');
      assert.equal(await sh(id, 'cat /sys/fs/cgroup/cpuset/cpuset.cpus'), '0');
      assert.equal(await sh(id, 'cat /sys/fs/cgroup/pids/pids.max'), '77');
    } else {
      assert.equal(await sh(id, 'cat /sys/fs/cgroup/memory.max'), String(96 << 20));
      assert.equal(await sh(id, 'cat /sys/fs/cgroup/pids.max'), '77');
    }
    const reported = (await world.status(id)).status!.resources!.linux!;
    assert.equal(reported.memoryLimitInBytes, 96n << 20n, 'ContainerStatus reports the resources the plugin set');
    assert.equal(reported.cpuShares, 300n);
    assert.equal(reported.cpusetCpus, '0');
    assert.equal(reported.oomScoreAdj, 432n);
    const info = await world.info(id);
    assert.equal(info.runtimeSpec.annotations['nri.stove.test/added'], 'yes');
    assert.equal(info.runtimeSpec.annotations['io.kubernetes.cri.image-name'], undefined);
    assert.equal(info.cgroupsPath, cgroupsPath);
    assert.equal(info.runtimeSpec.linux.resources.blockIO, undefined);
    assert.match(world.daemon.output(), /block I\/O class \\"slowdisk\\" ignored/);
  });

  it('refuses adjustments this host cannot apply, naming them, and leaves nothing behind', async () => {
    const layout = await detectCgroups();
    const p = await connect('unapplicable', '10');
    const pod = await world.pod();
    p.onCreate = adjusting({ CDIDevices: [{ name: 'vendor.example/gpu=0' }] });
    await rejectsWith(world.create(pod, world.config('sleeper')), 'INVALID_ARGUMENT', /unresolvable CDI devices vendor.example\/gpu=0/);
    if (layout.version === 1) {
      p.onCreate = adjusting({ linux: { resources: { unified: { 'memory.high': '1000000' } } } });
      await rejectsWith(world.create(pod, world.config('sleeper')), 'INVALID_ARGUMENT', /unified cgroup resources need cgroup v2/);
    }
  });

  it('applies updates of other containers: in answer to events, and when a plugin asks on its own', async () => {
    const rt = world.daemon.clients.runtime;
    const pod = await world.pod();
    const target = await world.run(pod, world.config('sleeper'));
    const memLimit = async () => Number(await sh(target, 'cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max'));
    const shares = async () => Number(await sh(target, 'cat /sys/fs/cgroup/cpu/cpu.shares 2>/dev/null || cat /sys/fs/cgroup/cpu.weight'));
    const p = await connect('updater', '10');

    const rpl = await p.updateContainers([ContainerUpdate.fromPartial({ containerId: target, linux: { resources: { memory: { limit: { value: 80n << 20n } } } } })]);
    assert.deepEqual(rpl.failed, []);
    assert.equal(await memLimit(), 80 << 20);
    assert.equal((await world.status(target)).status!.resources!.linux!.memoryLimitInBytes, 80n << 20n);

    p.onCreate = () => CreateContainerResponse.fromPartial({ update: [{ containerId: target, linux: { resources: { memory: { limit: { value: 72n << 20n } } } } }] });
    await world.run(pod, world.config('sleeper'));
    await eventually('the update asked for in answer to CreateContainer', async () => (await memLimit()) === 72 << 20);

    p.onUpdate = (req) => UpdateContainerResponse.fromPartial({ update: [{ containerId: req.container!.id, linux: { resources: { cpu: { shares: { value: 600n } } } } }] });
    await rt.updateContainerResources(UpdateContainerResourcesRequest.fromPartial({ containerId: target, linux: { cpuShares: 200n } }));
    if ((await detectCgroups()).version === 1) assert.equal(await shares(), 600, "the plugin's change to the update wins");

    const missing = await p.updateContainers([ContainerUpdate.fromPartial({ containerId: 'f'.repeat(64), linux: { resources: {} } })]);
    assert.deepEqual(missing.failed.map((u) => u.containerId), ['f'.repeat(64)]);
  });

  it('fails a create naming both plugins when they set the same thing', async () => {
    const a = await connect('first', '10');
    const b = await connect('second', '20');
    a.onCreate = adjusting({ env: [{ key: 'CLASH', value: 'a' }] });
    b.onCreate = adjusting({ env: [{ key: 'CLASH', value: 'b' }] });
    const pod = await world.pod();
    const names = [a, b].map((p) => (p as unknown as { o: { index: string; name: string } }).o).map((o) => `${o.index}-${o.name}`);
    await rejectsWith(world.create(pod, world.config('sleeper')), 'INVALID_ARGUMENT', new RegExp(`plugins "${names[1]}" and "${names[0]}" both tried to set env CLASH`));
  });

  it("fails a create with the plugin named when the plugin answers an error", async () => {
    const p = await connect('refuser', '10');
    p.onCreate = () => {
      throw new Error('policy forbids this container');
    };
    const pod = await world.pod();
    const name = (p as unknown as { o: { name: string } }).o.name;
    await rejectsWith(world.create(pod, world.config('sleeper')), 'INTERNAL', new RegExp(`NRI plugin "10-${name}" failed to handle CreateContainer: policy forbids this container`));
  });

  it('drops a plugin that does not answer in time; the create completes without it', async () => {
    const p = await connect('sleepy', '10');
    p.onCreate = () => new Promise(() => {});
    const pod = await world.pod();
    const started = Date.now();
    const id = await world.run(pod, world.config('sleeper'));
    assert.ok(Date.now() - started < 8000, `create + start took ${Date.now() - started} ms with a 1 s request timeout`);
    await p.closed;
    const name = (p as unknown as { o: { name: string } }).o.name;
    await eventually('the plugin to leave the list', async () => !(await status()).plugins.some((x) => x.name === name));
    assert.equal(await sh(id, 'echo ok'), 'ok');
  });

  it('a plugin killed in the middle of a request: the create completes and the plugin is dropped', async () => {
    const pod = await world.pod();
    const started = Date.now();
    const id = await world.run(pod, world.config('sleeper', { metadata: { name: 'kill-me', attempt: 0 } }));
    assert.ok(Date.now() - started < 8000, `took ${Date.now() - started} ms`);
    const victim = (await readFile(join(dir, 'victim.jsonl'), 'utf8')).trim().split('\n').map((l) => (JSON.parse(l) as { event: string }).event);
    assert.equal(victim.at(-1), 'CreateContainer', 'the victim died handling CreateContainer');
    await eventually('the victim to leave the list', async () => !(await status()).plugins.some((x) => x.name === 'victim'));
    assert.equal(await sh(id, 'echo $PRELAUNCHED'), 'yes', 'the other plugins still adjusted it');
  });
});
