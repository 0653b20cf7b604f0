/**
 * The adaptation with test plugins over real sockets and a fake Stove: call order, timeouts, a plugin
 * gone mid-request, a plugin's error, unsolicited updates, split synchronization.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Container, ContainerUpdate, CreateContainerResponse, Event, LinuxResources, PodSandbox } from '../../../src/gen/nri/api.js';
import { silentLogger } from '../../../src/common/logger.js';
import { defaultConfig, type NriDefaultValidatorConfig } from '../../../src/config/schema.js';
import { NriAdaptation } from '../../../src/nri/adaptation.js';
import { splitSync } from '../../../src/nri/plugin.js';
import { TestPlugin } from '../../helpers/nri-plugin.js';
import { eventually } from '../../integration/sandbox/world.js';

describe('nri adaptation', () => {
  let dir: string;
  let nri: NriAdaptation;
  let applied: ContainerUpdate[];
  let plugins: TestPlugin[];
  const pod = PodSandbox.fromPartial({ id: 'pod1', name: 'p' });
  const ctr = (id = 'c1') => Container.fromPartial({ id, podSandboxId: 'pod1', name: id, env: ['A=1'] });

  async function start(requestMs = 500, defaultValidator?: NriDefaultValidatorConfig): Promise<void> {
    nri = new NriAdaptation({
      defaultValidator,
      socketPath: join(dir, 'nri.sock'),
      pluginPath: join(dir, 'plugins'),
      pluginConfigPath: join(dir, 'conf.d'),
      disableConnections: false,
      timeouts: { registrationMs: 1000, requestMs },
      runtimeName: 'stove',
      runtimeVersion: 'test',
      host: {
        snapshot: async () => ({ pods: [pod], containers: [ctr('existing')] }),
        updateContainer: async (u) => {
          if (u.containerId === 'missing') throw new Error('container "missing" not found');
          applied.push(u);
        },
      },
      log: silentLogger,
    });
    await nri.start();
  }

  async function plugin(name: string, index: string, events?: Event[]): Promise<TestPlugin> {
    const p = await TestPlugin.connect(join(dir, 'nri.sock'), { name, index, events });
    plugins.push(p);
    await eventually(`${index}-${name} to be synchronized`, async () => nri.list().some((x) => x.name === name), 3000);
    return p;
  }

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stove-nri-'));
    applied = [];
    plugins = [];
  });

  afterEach(async () => {
    for (const p of plugins) p.close();
    await nri?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('configures and synchronizes a plugin, then calls plugins in index order', async () => {
    await start();
    const order: string[] = [];
    const b = await plugin('b', '20');
    const a = await plugin('a', '10');
    assert.equal(a.configure?.runtimeName, 'stove');
    assert.equal(a.configure?.requestTimeout, 500n);
    assert.deepEqual(
      a.syncs.map((s) => [s.pods.map((p) => p.id), s.containers.map((c) => c.id)]),
      [[['pod1'], ['existing']]],
    );
    a.onCreate = () => (order.push('a'), CreateContainerResponse.fromPartial({ adjust: { env: [{ key: 'FROM_A', value: '1' }] } }));
    b.onCreate = (req) => {
      order.push('b');
      // The later plugin sees the earlier one's adjustment.
      assert.ok(req.container?.env.includes('FROM_A=1'));
      return CreateContainerResponse.fromPartial({ adjust: { env: [{ key: 'FROM_B', value: '2' }] } });
    };
    const adjust = await nri.createContainer(pod, ctr());
    assert.deepEqual(order, ['a', 'b']);
    assert.deepEqual(
      adjust.env.map((e) => e.key),
      ['FROM_A', 'FROM_B'],
    );
    assert.deepEqual(
      nri.list().map((p) => `${p.index}-${p.name}`),
      ['10-a', '20-b'],
    );
  });

  it('relays every event a plugin subscribed to and no other', async () => {
    await start();
    const all = await plugin('all', '10');
    const some = await plugin('some', '20', [Event.START_CONTAINER, Event.REMOVE_POD_SANDBOX]);
    const c = ctr();
    await nri.runPodSandbox(pod);
    await nri.createContainer(pod, c);
    await nri.postCreateContainer(pod, c);
    await nri.startContainer(pod, c);
    await nri.postStartContainer(pod, c);
    await nri.updateContainer(pod, c, { memory: undefined, cpu: undefined, hugepageLimits: [], blockioClass: undefined, rdtClass: undefined, unified: {}, devices: [], pids: undefined });
    await nri.postUpdateContainer(pod, c);
    await nri.stopContainer(pod, c);
    await nri.removeContainer(pod, c);
    await nri.stopPodSandbox(pod);
    await nri.removePodSandbox(pod);
    assert.deepEqual(
      all.seen.map((e) => e.event),
      [
        'Synchronize',
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
      ],
    );
    assert.deepEqual(
      some.seen.map((e) => e.event),
      ['Synchronize', 'StartContainer', 'RemovePodSandbox'],
    );
  });

  it('sends a v0.12 plugin one method per event, a v0.8 plugin StateChange, and pod updates to the v0.12 one only', async () => {
    await start();
    const v12 = await TestPlugin.connect(join(dir, 'nri.sock'), { name: 'new', index: '10', protocol: 'v0.12' });
    plugins.push(v12);
    const v08 = await plugin('old', '20');
    await eventually('both plugins to be synchronized', async () => nri.list().length === 2, 3000);
    assert.equal(v12.configure?.NRIVersion, 'v0.12.3');
    const c = ctr();
    await nri.runPodSandbox(pod);
    await nri.startContainer(pod, c);
    const resources = LinuxResources.fromPartial({ memory: { limit: { value: 1n << 30n } } });
    await nri.updatePodSandbox(pod, undefined, resources);
    await nri.postUpdatePodSandbox(pod);
    await nri.removeContainer(pod, c);
    const events = (p: TestPlugin) => p.seen.filter((e) => e.event !== 'Synchronize').map((e) => `${e.event}/${e.via}`);
    assert.deepEqual(events(v12), ['RunPodSandbox/method', 'StartContainer/method', 'UpdatePodSandbox/method', 'PostUpdatePodSandbox/method', 'RemoveContainer/method']);
    // The v0.8 plugin subscribed to everything: StateChange after its one Unimplemented answer, and
    // no UpdatePodSandbox (it has no such method; the resize is not failed by that).
    assert.deepEqual(events(v08), ['RunPodSandbox/StateChange', 'StartContainer/StateChange', 'PostUpdatePodSandbox/StateChange', 'RemoveContainer/StateChange']);
    assert.equal(v12.podUpdates[0]?.linuxResources?.memory?.limit?.value, 1n << 30n);
    assert.equal(nri.list().length, 2);
  });

  it('fails a pod update with the plugin named when a plugin answers UpdatePodSandbox with an error', async () => {
    await start();
    const p = await TestPlugin.connect(join(dir, 'nri.sock'), { name: 'resizer', index: '10', protocol: 'v0.12', events: [Event.UPDATE_POD_SANDBOX] });
    plugins.push(p);
    await eventually('the plugin to be synchronized', async () => nri.list().length === 1, 3000);
    p.onUpdatePod = () => {
      throw new Error('no resizing today');
    };
    await assert.rejects(nri.updatePodSandbox(pod, undefined, undefined), /NRI plugin "10-resizer" failed to handle UpdatePodSandbox: no resizing today/);
    assert.equal(nri.list().length, 1);
  });

  it('accepts subscriptions to the events of v0.12 and refuses bits beyond them', async () => {
    await start();
    const ok = await TestPlugin.connect(join(dir, 'nri.sock'), { name: 'ok', index: '10', protocol: 'v0.12', events: [Event.POST_UPDATE_POD_SANDBOX, Event.VALIDATE_CONTAINER_ADJUSTMENT] });
    plugins.push(ok);
    await eventually('the plugin to be synchronized', async () => nri.list().length === 1, 3000);
    assert.equal(nri.list()[0].events, (1 << 12) | (1 << 13));
    const bad = await TestPlugin.connect(join(dir, 'nri.sock'), { name: 'bad', index: '20', protocol: 'v0.12', events: [Event.LAST] });
    plugins.push(bad);
    await bad.closed;
    assert.deepEqual(
      nri.list().map((x) => x.name),
      ['ok'],
    );
  });

  it('fails a create with the plugin named when the plugin answers an error, and keeps the plugin', async () => {
    await start();
    const p = await plugin('picky', '10');
    p.onCreate = () => {
      throw new Error('no containers named c1 here');
    };
    await assert.rejects(nri.createContainer(pod, ctr()), /NRI plugin "10-picky" failed to handle CreateContainer: no containers named c1 here/);
    assert.equal(nri.list().length, 1);
  });

  it('fails a create naming both plugins when they set the same thing', async () => {
    await start();
    const a = await plugin('a', '10');
    const b = await plugin('b', '20');
    a.onCreate = () => CreateContainerResponse.fromPartial({ adjust: { linux: { resources: { memory: { limit: { value: 1n << 26n } } } } } });
    b.onCreate = () => CreateContainerResponse.fromPartial({ adjust: { linux: { resources: { memory: { limit: { value: 1n << 27n } } } } } });
    await assert.rejects(nri.createContainer(pod, ctr()), /plugins "20-b" and "10-a" both tried to set memory limit/);
  });

  it('drops a plugin that does not answer in time; the create goes on without it', async () => {
    await start(200);
    const slow = await plugin('slow', '10');
    const fine = await plugin('fine', '20');
    slow.onCreate = () => new Promise(() => {});
    fine.onCreate = () => CreateContainerResponse.fromPartial({ adjust: { env: [{ key: 'OK', value: '1' }] } });
    const started = Date.now();
    const adjust = await nri.createContainer(pod, ctr());
    assert.ok(Date.now() - started < 2000, 'bounded by the request timeout');
    assert.deepEqual(
      adjust.env.map((e) => e.key),
      ['OK'],
    );
    assert.deepEqual(
      nri.list().map((p) => p.name),
      ['fine'],
    );
    await slow.closed;
  });

  it('drops a plugin whose connection goes away mid-request', async () => {
    await start(5000);
    const dying = await plugin('dying', '10');
    dying.onCreate = () => {
      dying.socket.destroy();
      return new Promise(() => {});
    };
    const started = Date.now();
    await nri.createContainer(pod, ctr());
    assert.ok(Date.now() - started < 1000, 'no wait for the request timeout');
    assert.deepEqual(nri.list(), []);
  });

  it('drops a plugin that does not register in time', async () => {
    await start();
    const { connect } = await import('node:net');
    const s = connect(join(dir, 'nri.sock'));
    const closed = new Promise((r) => s.on('close', r));
    s.on('error', () => {});
    await closed;
    assert.deepEqual(nri.list(), []);
  });

  it('applies updates a plugin asks for, in answer to an event and on its own', async () => {
    await start();
    const p = await plugin('tuner', '10');
    p.onCreate = () => CreateContainerResponse.fromPartial({ update: [{ containerId: 'existing', linux: { resources: { cpu: { shares: { value: 300n } } } } }] });
    await nri.createContainer(pod, ctr());
    await nri.settled();
    assert.deepEqual(
      applied.map((u) => [u.containerId, u.linux?.resources?.cpu?.shares?.value]),
      [['existing', 300n]],
    );
    const rpl = await p.updateContainers([
      ContainerUpdate.fromPartial({ containerId: 'existing', linux: { resources: { memory: { limit: { value: 1n << 28n } } } } }),
      ContainerUpdate.fromPartial({ containerId: 'missing', linux: { resources: {} } }),
    ]);
    assert.deepEqual(
      rpl.failed.map((u) => u.containerId),
      ['missing'],
    );
    assert.equal(applied[1].linux?.resources?.memory?.limit?.value, 1n << 28n);
  });

  it('runs the built-in default validator when enabled, also with no plugin connected', async () => {
    const rules = (over: Partial<NriDefaultValidatorConfig>) => ({ ...defaultConfig().nri.defaultValidator, enable: true, ...over });
    await start(500, rules({ requiredPlugins: ['policy'], rejectOciHookAdjustment: true, tolerateMissingPluginsAnnotation: 'tolerate-missing-nri-plugins.noderesource.dev' }));
    // No plugin connected: the required one is missing, and that alone fails the create.
    await assert.rejects(
      nri.createContainer(pod, ctr()),
      /^StoveError\(InvalidArgument\): NRI: validator "00-default-validator" rejected container adjustment, reason: validation error: required plugin "policy" not present$/,
    );
    const tolerant = PodSandbox.fromPartial({ id: 'pod1', name: 'p', annotations: { 'tolerate-missing-nri-plugins.noderesource.dev': 'true' } });
    await nri.createContainer(tolerant, ctr());
    await plugin('policy', '10');
    const hooker = await plugin('hooker', '20');
    hooker.onCreate = () => CreateContainerResponse.fromPartial({ adjust: { hooks: { prestart: [{ path: '/bin/true', args: [], env: [] }] } } });
    await assert.rejects(nri.createContainer(pod, ctr()), /validator "00-default-validator" rejected container adjustment, reason: validation error: plugin "20-hooker" attempted restricted OCI hook injection/);
    hooker.onCreate = () => CreateContainerResponse.fromPartial({});
    await nri.createContainer(pod, ctr());
  });

  it('leaves validation to plugins when the built-in validator is off', async () => {
    await start(500, { ...defaultConfig().nri.defaultValidator, requiredPlugins: ['policy'], rejectOciHookAdjustment: true });
    const hooker = await plugin('hooker', '20');
    hooker.onCreate = () => CreateContainerResponse.fromPartial({ adjust: { hooks: { prestart: [{ path: '/bin/true', args: [], env: [] }] } } });
    const adjust = await nri.createContainer(pod, ctr());
    assert.equal(adjust.hooks?.prestart.length, 1);
  });

  it('splits a synchronization over the message limit', () => {
    const big = Array.from({ length: 40 }, (_, i) => Container.fromPartial({ id: `c${i}`, env: [`X=${'x'.repeat(200_000)}`] }));
    const parts = splitSync([pod], big);
    assert.ok(parts.length > 1);
    assert.deepEqual(
      parts.flatMap((p) => p.containers.map((c) => c.id)),
      big.map((c) => c.id),
    );
  });
});
