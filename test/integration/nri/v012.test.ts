/**
 * NRI v0.12 against a real `stove serve` with real runc containers: a plugin built on containerd/nri
 * v0.12.3's stub (plugin-v012/main.go, built by plugin-v012/build-plugin.sh into a cache outside the
 * repo; the test is skipped with its reason without it), pre-launched and external. It checks the
 * per-event methods with v0.12's container fields, the v0.12 adjustments Stove applies (args, sysctls)
 * from inside the container, UpdatePodSandbox/PostUpdatePodSandbox on a pod resize and a plugin's
 * error failing it, and the refusal of an adjustment Stove does not apply. A plugin of the v0.8
 * protocol (StateChange only) is connected throughout and keeps getting its events.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { LinuxContainerResources, SecurityProfile_ProfileType } from '../../../src/gen/runtime/v1/api.js';
import { cgroupDirs, createCgroup, detectCgroups, removeCgroup } from '../../../src/platform/cgroups.js';
import { stopChild } from '../../helpers/child.js';
import { TestPlugin } from '../../helpers/nri-plugin.js';
import { suiteHooks } from '../../helpers/suite.js';
import { ContainerWorld, eventually, rejectsWith, skipReason as worldSkipReason } from '../container/world.js';
import { installRecorder, nriTestDir, nriToml } from './config.js';

const PLUGIN = process.env.NRI_V012_PLUGIN ?? '/var/cache/stove-e2e/nri-v012/stove-nri-v012-plugin';

function skipReason(): string | undefined {
  if (!existsSync(PLUGIN)) return `the NRI v0.12 test plugin is not at ${PLUGIN} (build it with test/integration/nri/plugin-v012/build-plugin.sh, or set NRI_V012_PLUGIN)`;
  return worldSkipReason();
}

interface Line {
  plugin: string;
  event: string;
  pod?: string;
  container?: string;
  name?: string;
  state?: string;
  args?: string[];
  image?: string;
  createdAt?: number;
  startedAt?: number;
  finishedAt?: number;
  sysctl?: Record<string, string>;
  seccompSyscalls?: number;
  seccompProfile?: string;
  memoryLimit?: number;
  runtime?: string;
}

describe('NRI v0.12 plugins (real daemon, runc, conmon)', function () {
  this.timeout(120_000);
  const world = new ContainerWorld();
  let dir = '';
  let legacy: TestPlugin | undefined;
  const children: ChildProcess[] = [];
  const socket = () => join(dir, 'nri.sock');
  const logFile = () => join(dir, 'v012.jsonl');

  suiteHooks({
    what: 'NRI v0.12 integration tests',
    skipReason,
    setup: async () => {
      dir = await nriTestDir('stove-nri12-it-');
      await installRecorder(dir, PLUGIN, logFile());
      // NRI's own default validator (the one containerd and CRI-O build in), as a pre-launched plugin
      // with its YAML config: it rejects namespace adjustments, naming the plugin from the field owners.
      await writeFile(join(dir, 'plugins', '05-validator'), `#!/bin/sh\nexec ${PLUGIN} -default-validator\n`, { mode: 0o755 });
      await mkdir(join(dir, 'conf.d'));
      await writeFile(join(dir, 'conf.d', '05-validator.conf'), 'rejectNamespaceAdjustment: true\n');
      world.pods.extraToml = [
        ...nriToml(dir, { registration: '5s', request: '2s' }),
      ];
      await world.start();
      legacy = await TestPlugin.connect(socket(), { name: 'legacy', index: '90' });
      await eventually('the v0.8 plugin to be synchronized', async () => legacy!.seen.some((e) => e.event === 'Synchronize'));
    },
    tidy: async () => {
      for (const c of children.splice(0)) await stopChild(c);
      await world.removeAll().catch(() => {});
    },
    leftovers: () => world.leftovers(),
    cleanup: async () => {
      legacy?.close();
      await world.cleanup();
      if (dir) await rm(dir, { recursive: true, force: true });
    },
  });

  afterEach(function () {
    if (this.currentTest?.state === 'failed') process.stderr.write(world.daemon.output().split('\n').filter((l) => /nri|NRI/.test(l)).slice(-30).join('\n') + '\n');
  });

  async function lines(): Promise<Line[]> {
    const text = await readFile(logFile(), 'utf8').catch(() => '');
    return text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Line);
  }

  const sh = async (id: string, script: string) => (await world.exec(id, ['sh', '-c', script])).stdout.trim();

  /** Starts the v0.12 plugin as an external one on the daemon's socket; waits until it is synchronized. */
  async function external(name: string, index: string, ...flags: string[]): Promise<void> {
    const child = spawn(PLUGIN, ['-name', name, '-idx', index, '-socket', socket(), '-log', logFile(), ...flags], { stdio: ['ignore', 'ignore', 'pipe'] });
    children.push(child);
    const listed = async () => {
      const status = JSON.parse(await readFile(join(world.daemon.state, 'nri-plugins.json'), 'utf8')) as { plugins: { name: string; index: string }[] };
      return status.plugins.some((p) => p.name === name && p.index === index);
    };
    await eventually(`plugin ${index}-${name} to be synchronized`, listed);
  }

  it('configures the pre-launched v0.12 plugin and sends it one method per event with the v0.12 container fields', async () => {
    const configured = (await lines()).find((l) => l.event === 'Configure' && l.plugin === 'recorder');
    assert.equal(configured?.runtime, 'stove');
    const pod = await world.pod();
    const id = await world.run(pod, world.config('sleeper', { linux: { securityContext: { seccomp: { profileType: SecurityProfile_ProfileType.RuntimeDefault } } } }));
    await world.daemon.clients.runtime.stopContainer({ containerId: id, timeout: 0n });
    await world.daemon.clients.runtime.removeContainer({ containerId: id });
    await eventually('RemoveContainer to reach the plugin', async () => (await lines()).some((l) => l.container === id && l.event === 'RemoveContainer'));
    const mine = (await lines()).filter((l) => l.container === id);
    assert.deepEqual(
      mine.map((l) => l.event),
      ['CreateContainer', 'PostCreateContainer', 'StartContainer', 'PostStartContainer', 'StopContainer', 'RemoveContainer'],
    );
    const byEvent = new Map(mine.map((l) => [l.event, l]));
    assert.equal(byEvent.get('CreateContainer')!.image, world.image('sleeper').reference);
    assert.ok((byEvent.get('PostCreateContainer')!.createdAt ?? 0) > 0, 'created_at is set');
    assert.ok((byEvent.get('PostStartContainer')!.startedAt ?? 0) > 0, 'started_at is set');
    assert.equal(byEvent.get('StopContainer')!.state, 'CONTAINER_STOPPED');
    assert.ok((byEvent.get('RemoveContainer')!.finishedAt ?? 0) > 0, 'finished_at is set');
    assert.ok((byEvent.get('CreateContainer')!.seccompSyscalls ?? 0) > 0, 'the seccomp filter of the spec is described');
    assert.equal(byEvent.get('CreateContainer')!.seccompProfile, 'RUNTIME_DEFAULT', "the CRI's seccomp choice is described");
    assert.equal(byEvent.get('RemoveContainer')!.seccompProfile, 'RUNTIME_DEFAULT');
    // The v0.8 plugin got the same notifications as StateChange (each plugin is told in turn: wait for its last).
    await eventually('RemoveContainer to reach the v0.8 plugin', () => legacy!.eventsFor(id).includes('RemoveContainer'));
    assert.deepEqual(
      legacy!.eventsFor(id),
      ['CreateContainer', 'PostCreateContainer', 'StartContainer', 'PostStartContainer', 'StopContainer', 'RemoveContainer'],
    );
    assert.ok(legacy!.seen.filter((e) => e.container === id && e.event !== 'CreateContainer' && e.event !== 'StopContainer').every((e) => e.via === 'StateChange'));
  });

  it('applies the args, sysctl and rlimit a v0.12 plugin sets, checked inside the container', async () => {
    const pod = await world.pod({
      annotations: {
        'nri.stove.test/args.container.adjusted': JSON.stringify(['sh', '-c', 'echo from-nri-args; sleep 3600']),
        'nri.stove.test/sysctl.container.adjusted': 'net.ipv4.ip_unprivileged_port_start=2000',
        'nri.stove.test/rlimit.container.adjusted': 'RLIMIT_NOFILE=1000:2000',
      },
    });
    const id = await world.run(pod, world.config('sleeper', { metadata: { name: 'adjusted', attempt: 0 } }));
    assert.deepEqual((await world.info(id)).runtimeSpec.process.args, ['sh', '-c', 'echo from-nri-args; sleep 3600']);
    // The process ran them: its output is in the container's log.
    const logPath = (await world.status(id)).status!.logPath;
    await eventually('the new args to print', async () => (await world.logLines(logPath)).some((l) => l.text === 'from-nri-args'));
    assert.equal(await sh(id, 'cat /proc/sys/net/ipv4/ip_unprivileged_port_start'), '2000');
    // The container's own process: runc 1.1.5 sets an exec's rlimits from outside while the exec's Go
    // runtime may still raise its soft limit to the hard one, so an exec'd shell shows 2000/2000 now and then.
    assert.match(await sh(id, 'grep "Max open files" /proc/$(pidof sleep)/limits'), /^Max open files\s+1000\s+2000\s+files/);
    assert.equal(await sh(id, 'echo $NRI_V012_PLUGIN'), 'recorder');
    // Later events describe the container with what the plugin set.
    await eventually('PostStartContainer to reach the plugin', async () => (await lines()).some((l) => l.container === id && l.event === 'PostStartContainer'));
    const started = (await lines()).find((l) => l.container === id && l.event === 'PostStartContainer')!;
    assert.deepEqual(started.args, ['sh', '-c', 'echo from-nri-args; sleep 3600']);
    assert.equal(started.sysctl?.['net.ipv4.ip_unprivileged_port_start'], '2000');
  });

  it('asks validator plugins with the field owners: a rejection fails the create, naming validator and plugin', async () => {
    await external('guard', '95', '-validator');
    const pod = await world.pod({
      annotations: {
        'nri.stove.test/sysctl.container.tuned': 'net.ipv4.ip_unprivileged_port_start=3000',
        'nri.stove.test/netns.container.moved': '/proc/1/ns/net',
      },
    });
    const rt = world.daemon.clients.runtime;
    // The sysctl validator written here rejects the sysctl the recorder sets.
    await rejectsWith(
      rt.createContainer({ podSandboxId: pod.id, config: world.config('sleeper', { metadata: { name: 'tuned', attempt: 0 } }), sandboxConfig: pod.config }),
      'INVALID_ARGUMENT',
      /validator "95-guard" rejected container adjustment, reason: .*net\.ipv4\.ip_unprivileged_port_start by 10-recorder/,
    );
    // NRI's default validator (rejectNamespaceAdjustment) rejects the namespace the recorder sets.
    await rejectsWith(
      rt.createContainer({ podSandboxId: pod.id, config: world.config('sleeper', { metadata: { name: 'moved', attempt: 0 } }), sandboxConfig: pod.config }),
      'INVALID_ARGUMENT',
      /validator "05-validator" rejected container adjustment, reason: .*restricted namespace adjustment by plugin\(s\) "10-recorder" \(namespace "network"\)/,
    );
    const validated = (await lines()).filter((l) => l.plugin === 'guard' && l.event === 'ValidateContainerAdjustment');
    assert.deepEqual((validated.at(-1) as unknown as { plugins: string[] }).plugins.sort(), ['05-validator', '10-recorder', '90-legacy', '95-guard']);
    // Nothing was left of the refused creates; a container neither validator objects to runs.
    assert.equal((await rt.listContainers({ filter: { podSandboxId: pod.id, id: '', state: undefined, labelSelector: {} } })).containers.length, 0);
    const id = await world.run(pod, world.config('sleeper', { metadata: { name: 'plain', attempt: 0 } }));
    assert.equal(await sh(id, 'echo ok'), 'ok');
  });

  it('raises UpdatePodSandbox and PostUpdatePodSandbox on a pod resize; a plugin error fails the resize and leaves the cgroup', async () => {
    const layout = await detectCgroups();
    const podCgroup = `${world.pods.cgroupRoot}/nri12-resize-${world.pods.tag}`;
    await createCgroup(layout, podCgroup);
    try {
      const pod = await world.pod({ linux: { cgroupParent: podCgroup } });
      const MiB = 1024n * 1024n;
      const rt = world.daemon.clients.runtime;
      await rt.updatePodSandboxResources({ podSandboxId: pod.id, overhead: undefined, resources: LinuxContainerResources.fromPartial({ memoryLimitInBytes: 256n * MiB }) });
      await eventually('PostUpdatePodSandbox to reach the plugin', async () => (await lines()).some((l) => l.pod === pod.id && l.event === 'PostUpdatePodSandbox'));
      const update = (await lines()).find((l) => l.pod === pod.id && l.event === 'UpdatePodSandbox');
      assert.equal(update?.memoryLimit, Number(256n * MiB));
      await eventually('the v0.8 plugin to get PostUpdatePodSandbox', async () => legacy!.seen.some((e) => e.pod === pod.id && e.event === 'PostUpdatePodSandbox' && e.via === 'StateChange'));

      await external('refuser', '50', '-fail-pod-update');
      await rejectsWith(
        rt.updatePodSandboxResources({ podSandboxId: pod.id, overhead: undefined, resources: LinuxContainerResources.fromPartial({ memoryLimitInBytes: 128n * MiB }) }),
        'INTERNAL',
        /NRI plugin "50-refuser" failed to handle UpdatePodSandbox: .*pod resizing is refused by this plugin/,
      );
      if (layout.version === 1) {
        const limit = (await readFile(join(cgroupDirs(layout, podCgroup).memory!, 'memory.limit_in_bytes'), 'utf8')).trim();
        assert.equal(limit, String(256n * MiB), 'the refused resize did not touch the cgroup');
      }
      await world.removeAll();
    } finally {
      await removeCgroup(layout, podCgroup).catch(() => {});
    }
  });
});
