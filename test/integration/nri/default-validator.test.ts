/**
 * The built-in default validator against a real `stove serve` with real runc containers and real
 * containerd/nri v0.12.3 plugins (plugin-v012/main.go, built by plugin-v012/build-plugin.sh; the test
 * is skipped with its reason without it). The pre-launched recorder adjusts containers as their pod's
 * annotations ask (an OCI hook, a seccomp filter, a namespace, a sysctl); Stove's validator, enabled
 * by `[nri.default_validator]`, rejects what the config restricts. NRI's own default validator runs
 * next to it as a pre-launched plugin with the same rules (its YAML config), so every rejection is
 * judged twice, by Stove's code and by upstream's, and the two reasons must agree. A rejected create
 * leaves nothing behind; what the rules allow runs.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SecurityProfile_ProfileType } from '../../../src/gen/runtime/v1/api.js';
import { stopChild } from '../../helpers/child.js';
import { suiteHooks } from '../../helpers/suite.js';
import { ContainerWorld, eventually, rejectsWith, skipReason as worldSkipReason } from '../container/world.js';
import { installRecorder, nriTestDir, nriToml } from './config.js';

const PLUGIN = process.env.NRI_V012_PLUGIN ?? '/var/cache/stove-e2e/nri-v012/stove-nri-v012-plugin';
const TOLERATE = 'tolerate-missing-nri-plugins.noderesource.dev';

function skipReason(): string | undefined {
  if (!existsSync(PLUGIN)) return `the NRI v0.12 test plugin is not at ${PLUGIN} (build it with test/integration/nri/plugin-v012/build-plugin.sh, or set NRI_V012_PLUGIN)`;
  return worldSkipReason();
}

describe('NRI default validator (real daemon, runc, v0.12 plugins)', function () {
  this.timeout(120_000);
  const world = new ContainerWorld();
  let dir = '';
  const children: ChildProcess[] = [];
  const socket = () => join(dir, 'nri.sock');
  const logFile = () => join(dir, 'plugins.jsonl');

  suiteHooks({
    what: 'NRI default validator integration tests',
    skipReason,
    setup: async () => {
      dir = await nriTestDir('stove-nri-dv-it-');
      await mkdir(join(dir, 'conf.d'));
      await installRecorder(dir, PLUGIN, logFile());
      // Upstream's default validator with the same rules, as a pre-launched plugin.
      await writeFile(join(dir, 'plugins', '05-upstream'), `#!/bin/sh\nexec ${PLUGIN} -default-validator\n`, { mode: 0o755 });
      await writeFile(
        join(dir, 'conf.d', '05-upstream.conf'),
        [
          'enable: true',
          'rejectOCIHookAdjustment: true',
          'rejectRuntimeDefaultSeccompAdjustment: true',
          'rejectNamespaceAdjustment: true',
          'rejectSysctlAdjustment: true',
          'requiredPlugins: [recorder]',
          `tolerateMissingPluginsAnnotation: ${TOLERATE}`,
          '',
        ].join('\n'),
      );
      world.pods.extraToml = [
        ...nriToml(dir),
        '[nri.default_validator]',
        'enable = true',
        'reject_oci_hook_adjustment = true',
        'reject_runtime_default_seccomp_adjustment = true',
        'reject_unconfined_seccomp_adjustment = false',
        'reject_namespace_adjustment = true',
        'reject_sysctl_adjustment = true',
        'required_plugins = ["recorder"]',
        `tolerate_missing_plugins_annotation = "${TOLERATE}"`,
      ];
      await world.start();
      await eventually('both pre-launched plugins to be synchronized', async () => {
        const status = JSON.parse(await readFile(join(world.daemon.state, 'nri-plugins.json'), 'utf8').catch(() => '{"plugins":[]}')) as { plugins: { name: string }[] };
        return status.plugins.length === 2;
      });
    },
    tidy: async () => {
      for (const c of children.splice(0)) await stopChild(c);
      await world.removeAll().catch(() => {});
    },
    leftovers: () => world.leftovers(),
    cleanup: async () => {
      await world.cleanup();
      if (dir) await rm(dir, { recursive: true, force: true });
    },
  });

  afterEach(function () {
    if (this.currentTest?.state === 'failed') process.stderr.write(world.daemon.output().split('\n').filter((l) => /nri|NRI/.test(l)).slice(-30).join('\n') + '\n');
  });

  const rt = () => world.daemon.clients.runtime;
  const containersOf = async (podId: string) => (await rt().listContainers({ filter: { podSandboxId: podId, id: '', state: undefined, labelSelector: {} } })).containers;

  /**
   * Creating `name` in `pod` fails with INVALID_ARGUMENT, rejected by Stove's validator and by
   * upstream's for the same reason, and leaves nothing: no container, no record, no bundle, no mount.
   */
  async function rejected(pod: Awaited<ReturnType<ContainerWorld['pod']>>, name: string, reason: RegExp, extra: Parameters<ContainerWorld['config']>[1] = {}): Promise<string> {
    let message = '';
    await rejectsWith(
      rt()
        .createContainer({ podSandboxId: pod.id, config: world.config('sleeper', { ...extra, metadata: { name, attempt: 0 } }), sandboxConfig: pod.config })
        .catch((err: Error) => {
          message = err.message;
          throw err;
        }),
      'INVALID_ARGUMENT',
      /NRI: /,
    );
    const stove = /validator "00-default-validator" rejected container adjustment, reason: ([^;]*)/.exec(message)?.[1];
    const upstream = /validator "05-upstream" rejected container adjustment, reason: ([^;]*)/.exec(message)?.[1];
    assert.match(stove ?? '', reason, `Stove's validator: ${message}`);
    assert.ok(upstream, `upstream's validator rejected it too: ${message}`);
    assert.deepEqual(await containersOf(pod.id), []);
    assert.deepEqual(await world.containerLeftovers(), []);
    return upstream;
  }

  it('rejects an OCI hook a plugin adds, as upstream does', async () => {
    const pod = await world.pod({ annotations: { 'nri.stove.test/hook.container.hooked': '/bin/true' } });
    const upstream = await rejected(pod, 'hooked', /^validation error: plugin "10-recorder" attempted restricted OCI hook injection$/);
    assert.equal(upstream, 'validation error: plugin "10-recorder" attempted restricted OCI hook injection');
  });

  it('rejects a seccomp filter replaced under RuntimeDefault and allows it where the profile is unconfined', async () => {
    const pod = await world.pod({ annotations: { 'nri.stove.test/seccomp.container.filtered': 'SCMP_ACT_ALLOW', 'nri.stove.test/seccomp.container.open': 'SCMP_ACT_ALLOW' } });
    const upstream = await rejected(pod, 'filtered', /^validation error: plugin "10-recorder" attempted restricted runtime default seccomp policy adjustment$/, {
      linux: { securityContext: { seccomp: { profileType: SecurityProfile_ProfileType.RuntimeDefault } } },
    });
    assert.match(upstream, /plugin 10-recorder attempted restricted runtime default seccomp policy adjustment/);
    // No seccomp profile asked for is unconfined, which this config leaves open: the plugin's filter applies.
    const id = await world.run(pod, world.config('sleeper', { metadata: { name: 'open', attempt: 0 } }));
    assert.equal((await world.info(id)).runtimeSpec.linux.seccomp?.defaultAction, 'SCMP_ACT_ALLOW');
    assert.equal((await world.exec(id, ['sh', '-c', 'echo ok'])).stdout.trim(), 'ok');
  });

  it('rejects a namespace and a sysctl a plugin sets, naming the plugin', async () => {
    const pod = await world.pod({
      annotations: { 'nri.stove.test/netns.container.moved': '/proc/1/ns/net', 'nri.stove.test/sysctl.container.tuned': 'net.ipv4.ip_unprivileged_port_start=3000' },
    });
    const ns = await rejected(pod, 'moved', /^validation error: attempted restricted namespace adjustment by plugin\(s\) "10-recorder" \(namespace "network"\)$/);
    assert.equal(ns, 'validation error: attempted restricted namespace adjustment by plugin(s) "10-recorder" (namespace "network")');
    const sysctl = await rejected(pod, 'tuned', /^validation error: attempted restricted sysctl adjustment by plugin\(s\) "10-recorder" \(sysctl "net\.ipv4\.ip_unprivileged_port_start"\)$/);
    assert.equal(sysctl, 'validation error: attempted restricted sysctl adjustment by plugin(s) 10-recorder');
  });

  it('requires the configured and annotated plugins unless the pod tolerates their absence', async () => {
    // The configured one (recorder) runs; the pod's annotation asks for one that does not.
    const needy = await world.pod({ annotations: { 'required-plugins.noderesource.dev/container.needy': '["recorder", "gatekeeper"]' } });
    const upstream = await rejected(needy, 'needy', /^validation error: required plugin "gatekeeper" not present$/);
    assert.equal(upstream, 'validation error: required plugin "gatekeeper" not present');
    // The annotation is scoped to that container: another in the same pod is created.
    const other = await world.run(needy, world.config('sleeper', { metadata: { name: 'other', attempt: 0 } }));
    assert.equal((await world.exec(other, ['sh', '-c', 'echo $NRI_V012_PLUGIN'])).stdout.trim(), 'recorder');

    const tolerant = await world.pod({ annotations: { 'required-plugins.noderesource.dev': '[gatekeeper]', [TOLERATE]: 'true' } });
    const id = await world.run(tolerant, world.config('sleeper', { metadata: { name: 'tolerated', attempt: 0 } }));
    assert.equal((await world.exec(id, ['sh', '-c', 'echo ok'])).stdout.trim(), 'ok');

    // An external plugin named gatekeeper (a validator itself) connects: the needy container is created now.
    const child = spawn(PLUGIN, ['-name', 'gatekeeper', '-idx', '50', '-socket', socket(), '-log', logFile(), '-validator'], { stdio: ['ignore', 'ignore', 'pipe'] });
    children.push(child);
    await eventually('gatekeeper to be synchronized', async () =>
      ((JSON.parse(await readFile(join(world.daemon.state, 'nri-plugins.json'), 'utf8')) as { plugins: { name: string }[] }).plugins.some((p) => p.name === 'gatekeeper')),
    );
    const created = await world.run(needy, world.config('sleeper', { metadata: { name: 'needy', attempt: 0 } }));
    assert.equal((await world.exec(created, ['sh', '-c', 'echo ok'])).stdout.trim(), 'ok');
    // Validator plugins see the built-in one among the plugins consulted, as under containerd.
    const lines = (await readFile(logFile(), 'utf8')).split('\n').filter(Boolean).map((l) => JSON.parse(l) as { plugin: string; event: string; container?: string; plugins?: string[] });
    const seen = lines.filter((l) => l.plugin === 'gatekeeper' && l.event === 'ValidateContainerAdjustment' && l.container === 'needy').at(-1);
    assert.deepEqual(seen?.plugins, ['00-default-validator', '05-upstream', '10-recorder', '50-gatekeeper']);
  });
});
