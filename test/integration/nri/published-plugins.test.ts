/**
 * The plugins containerd/nri v0.8.0 publishes (logger, device-injector, ulimit-adjuster, template),
 * built by hand from their sources (`../shared/nri/build-plugins.sh OUT_DIR …`, nothing of them is in
 * this repository) and run against a real daemon: the external ones dial NRI's default socket path,
 * which a private mount namespace points at this test's daemon; `template` is pre-launched from
 * plugin_path. Skipped with the reason when the binaries are missing.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, copyFile, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { UpdateContainerResourcesRequest } from '../../../src/gen/runtime/v1/api.js';
import { stopChild } from '../../helpers/child.js';
import { suiteHooks } from '../../helpers/suite.js';
import { ContainerWorld, eventually, skipReason as worldSkipReason } from '../container/world.js';
import { nriTestDir } from './config.js';

const PLUGINS_DIR = process.env.NRI_TEST_PLUGINS ?? '/var/tmp/stove-nri-plugins';
const PLUGINS = ['logger', 'device-injector', 'ulimit-adjuster', 'template'];

function skipReason(): string | undefined {
  const missing = PLUGINS.filter((p) => !existsSync(join(PLUGINS_DIR, p)));
  if (missing.length) {
    return `the containerd/nri v0.8.0 plugins ${missing.join(', ')} are not in ${PLUGINS_DIR} (build them with ../shared/nri/build-plugins.sh ${PLUGINS_DIR} …, or set NRI_TEST_PLUGINS)`;
  }
  if (!existsSync('/usr/bin/unshare')) return '/usr/bin/unshare is missing';
  return worldSkipReason();
}

describe('NRI: the published containerd/nri v0.8.0 plugins (by hand)', function () {
  this.timeout(120_000);
  const world = new ContainerWorld();
  let dir = '';
  const children: ChildProcess[] = [];
  let output = '';

  /** Starts a published plugin as an external one, dialing /var/run/nri/nri.sock, which leads to our daemon. */
  async function external(name: string, args: string[]): Promise<void> {
    const script = `mount --bind ${join(dir, 'run')} /run && exec ${join(PLUGINS_DIR, name)} "$@"`;
    const child = spawn('/usr/bin/unshare', ['--mount', '--propagation', 'private', '/bin/sh', '-c', script, name, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    children.push(child);
    const index = args[args.indexOf('-idx') + 1];
    await eventually(`${index}-${name} to register`, async () => (await listed()).includes(`${index}-${name}`), 10_000).catch((err: Error) => {
      throw new Error(`${err.message}\n${output}`);
    });
  }

  async function listed(): Promise<string[]> {
    const status = JSON.parse(await readFile(join(world.daemon.state, 'nri-plugins.json'), 'utf8')) as { plugins: { index: string; name: string }[] };
    return status.plugins.map((p) => `${p.index}-${p.name}`);
  }

  suiteHooks({
    what: 'the published NRI plugins',
    skipReason,
    setup: async () => {
      dir = await nriTestDir('stove-nri-pub-');
      await mkdir(join(dir, 'run', 'nri'), { recursive: true });
      await mkdir(join(dir, 'conf.d'));
      await copyFile(join(PLUGINS_DIR, 'template'), join(dir, 'plugins', '10-template'));
      await chmod(join(dir, 'plugins', '10-template'), 0o755);
      await writeFile(join(dir, 'conf.d', 'template.conf'), 'cfgParam1: hello-from-stove\n');
      world.pods.extraToml = [
        '[nri]',
        'enable = true',
        `socket_path = "${join(dir, 'run', 'nri', 'nri.sock')}"`,
        `plugin_path = "${join(dir, 'plugins')}"`,
        `plugin_config_path = "${join(dir, 'conf.d')}"`,
      ];
      await world.start();
      await external('logger', ['-idx', '20', '-log-file', join(dir, 'logger.log'), '-add-env', 'LOGGER_ENV', '-add-annotation', 'logger.nri.stove.test']);
      await external('device-injector', ['-idx', '30']);
      await external('ulimit-adjuster', ['-idx', '40']);
    },
    tidy: () => world.removeAll().catch(() => {}),
    leftovers: () => world.leftovers(),
    cleanup: async () => {
      await Promise.all(children.map((c) => stopChild(c)));
      await world.cleanup();
      if (dir) await rm(dir, { recursive: true, force: true });
    },
  });

  const sh = async (id: string, script: string) => (await world.exec(id, ['sh', '-c', script])).stdout.trim();

  it('pre-launches template with its config from plugin_path', async () => {
    assert.ok((await listed()).includes('10-template'));
    await eventually('the template plugin to log its configuration', async () => /Connected to stove\//.test(world.daemon.output()) && /Got configuration data .*\{hello-from-stove\}/.test(world.daemon.output())).catch((err: Error) => {
      throw new Error(err.message + '\n' + world.daemon.output().split('\n').filter((l) => l.includes('template')).join('\n'));
    });
  });

  it('logger sees every event and adds its env var and annotation', async () => {
    const rt = world.daemon.clients.runtime;
    const pod = await world.pod();
    const id = await world.run(pod, world.config('sleeper'));
    assert.match(await sh(id, 'echo $LOGGER_ENV'), /^logger-pid-\d+$/);
    assert.match((await world.info(id)).runtimeSpec.annotations['logger.nri.stove.test'], /^logger-pid-\d+$/);
    await rt.updateContainerResources(UpdateContainerResourcesRequest.fromPartial({ containerId: id, linux: { cpuShares: 300n } }));
    await rt.stopContainer({ containerId: id, timeout: 0n });
    await rt.removeContainer({ containerId: id });
    await rt.stopPodSandbox({ podSandboxId: pod.id });
    await rt.removePodSandbox({ podSandboxId: pod.id });
    const events = [
      'RunPodSandbox',
      'CreateContainer',
      'PostCreateContainer',
      'StartContainer',
      'PostStartContainer',
      'UpdateContainer',
      'PostUpdateContainer',
      'StopContainer',
      'RemoveContainer',
      'StopPodSandbox',
      'RemovePodSandbox',
    ];
    const seen = async () => {
      const log = await readFile(join(dir, 'logger.log'), 'utf8');
      return events.filter((e) => log.includes(`msg="${e}: `));
    };
    await eventually('the logger to log every event', async () => (await seen()).length === events.length).catch(async (err: Error) => {
      throw new Error(`${err.message}: saw ${(await seen()).join(', ')}`);
    });
  });

  it('device-injector adds the device and mount a pod annotation names', async () => {
    const shared = join(dir, 'injected');
    await mkdir(shared, { recursive: true });
    await writeFile(join(shared, 'note'), 'mounted by device-injector\n');
    const pod = await world.pod({
      annotations: {
        'devices.nri.io/container.app': '- path: /dev/nri-null\n  type: c\n  major: 1\n  minor: 3\n  file_mode: 438\n',
        'mounts.nri.io/container.app': `- source: ${shared}\n  destination: /injected\n  type: bind\n  options: [rbind, ro]\n`,
      },
    });
    const id = await world.run(pod, world.config('sleeper', { metadata: { name: 'app', attempt: 0 } }));
    assert.match(await sh(id, 'ls -l /dev/nri-null'), /^crw-rw-rw-\s+1 root\s+root\s+1,\s+3 /);
    assert.equal(await sh(id, 'echo discarded > /dev/nri-null && echo written'), 'written');
    assert.equal(await sh(id, 'cat /injected/note'), 'mounted by device-injector');
    const other = await world.run(pod, world.config('sleeper', { metadata: { name: 'other', attempt: 0 } }));
    assert.equal(await sh(other, 'test -e /dev/nri-null && echo present || echo absent'), 'absent');
  });

  it('ulimit-adjuster sets the rlimits a pod annotation names', async () => {
    const pod = await world.pod({
      annotations: { 'ulimits.nri.containerd.io/container.limited': '- type: nofile\n  hard: 4096\n  soft: 1024\n- type: RLIMIT_NPROC\n  hard: 900\n  soft: 800\n' },
    });
    const id = await world.run(pod, world.config('sleeper', { metadata: { name: 'limited', attempt: 0 } }));
    const limits = await sh(id, 'cat /proc/$(pidof sleep)/limits');
    assert.match(limits, /Max open files\s+1024\s+4096/);
    assert.match(limits, /Max processes\s+800\s+900/);
  });
});
