import assert from 'node:assert/strict';
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { PodNetworkManager, type PodNetworkRequest } from '../../../src/network/pod-network.js';
import { isKind } from '../../../src/common/errors.js';
import { silentLogger } from '../../../src/common/logger.js';
import { FakeCni } from './fake-cni.js';

/** Any nsfs path passes the "is a network namespace" check; the fake plugin never enters it. */
const SELF_NETNS = '/proc/self/ns/net';
const ID = '4f1c0a2b3c4d';

const bridgeResult = {
  cniVersion: '1.0.0',
  interfaces: [{ name: 'cni0' }, { name: 'veth9' }, { name: 'eth0', sandbox: SELF_NETNS }],
  ips: [
    { interface: 2, address: '10.22.0.7/24', gateway: '10.22.0.1' },
    { interface: 2, address: 'fd22::7/64' },
  ],
};

function request(overrides: Partial<PodNetworkRequest> = {}): PodNetworkRequest {
  return {
    sandboxId: ID,
    netnsPath: SELF_NETNS,
    podName: 'web',
    podNamespace: 'shop',
    podUid: 'uid-1',
    portMappings: [{ hostPort: 8080, containerPort: 80, protocol: 'TCP' }],
    annotations: { 'kubernetes.io/egress-bandwidth': '5M' },
    ...overrides,
  };
}

describe('network/pod-network (fake plugins)', () => {
  let fake: FakeCni;
  let confDir: string;
  let manager: PodNetworkManager;

  const newManager = () =>
    new PodNetworkManager({
      cniConfDir: confDir,
      cniBinDirs: [fake.binDir],
      cniTimeoutSeconds: 5,
      netnsDir: join(fake.root, 'netns'),
      cacheDir: join(fake.root, 'cache'),
      log: silentLogger,
    });

  async function writeConf(version: string, plugins: unknown[], extra: Record<string, unknown> = {}, file = '10-test.conflist') {
    await writeFile(join(confDir, file), JSON.stringify({ cniVersion: version, name: 'testnet', plugins, ...extra }));
  }

  const twoPlugins = [
    { type: 'fake-a', ipam: { type: 'host-local' } },
    { type: 'fake-b', capabilities: { portMappings: true, bandwidth: true } },
  ];

  beforeEach(async () => {
    fake = await FakeCni.create(['fake-a', 'fake-b', 'fake-c']);
    confDir = join(fake.root, 'net.d');
    await mkdir(confDir);
    manager = newManager();
  });
  afterEach(async () => fake.cleanup());

  it('is not ready without a config and becomes ready when one appears', async () => {
    const before = await manager.readiness();
    assert.equal(before.ready, false);
    assert.equal(before.reason, 'NetworkPluginNotReady');
    assert.match(before.message, /^cni config uninitialized/);
    await writeConf('1.0.0', twoPlugins);
    assert.deepEqual(await manager.readiness(), { ready: true, reason: '', message: '' });
  });

  it('runs ADD down the list, chaining prevResult and filtering capabilities', async () => {
    await writeConf('1.0.0', twoPlugins);
    await fake.answer('fake-a', 'ADD', { out: bridgeResult });
    await fake.answer('fake-b', 'ADD', { out: bridgeResult });
    const result = await manager.setup(request());
    assert.deepEqual(await fake.calls(), ['fake-a ADD', 'fake-b ADD']);
    assert.equal(result.primaryIp, '10.22.0.7');
    assert.deepEqual(result.additionalIps, ['fd22::7']);
    assert.equal(result.interface, 'eth0');
    assert.equal(result.networkName, 'testnet');

    const envA = await fake.env(1);
    assert.equal(envA.CNI_ARGS, `IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=${ID};K8S_POD_UID=uid-1`);
    assert.equal(envA.CNI_CONTAINERID, ID);
    assert.equal(envA.CNI_IFNAME, 'eth0');
    assert.equal(envA.CNI_NETNS, SELF_NETNS);

    const stdinA = await fake.stdin(1);
    assert.equal(stdinA.name, 'testnet');
    assert.equal(stdinA.prevResult, undefined);
    assert.equal(stdinA.runtimeConfig, undefined, 'fake-a declares no capabilities');
    const stdinB = await fake.stdin(2);
    assert.deepEqual(stdinB.prevResult, bridgeResult);
    assert.deepEqual(stdinB.runtimeConfig, {
      portMappings: [{ hostPort: 8080, containerPort: 80, protocol: 'tcp' }],
      bandwidth: { egressRate: 5_000_000, egressBurst: 2147483647 },
    });
    assert.deepEqual((await manager.status(ID))?.ips, ['10.22.0.7', 'fd22::7']);
  });

  it('converts prevResult to the list version (0.4.0 wants ips[].version)', async () => {
    await writeConf('0.4.0', twoPlugins);
    await fake.answer('fake-a', 'ADD', { out: bridgeResult });
    await manager.setup(request());
    const prev = (await fake.stdin(2)).prevResult as { cniVersion: string; ips: { version: string }[] };
    assert.equal(prev.cniVersion, '0.4.0');
    assert.deepEqual(prev.ips.map((ip) => ip.version), ['4', '6']);
  });

  it('reports a plugin error Kubernetes-style and runs DEL for every ADD tried', async () => {
    await writeConf('1.0.0', [...twoPlugins, { type: 'fake-c' }]);
    await fake.answer('fake-a', 'ADD', { out: bridgeResult });
    await fake.answer('fake-b', 'ADD', { out: { code: 999, msg: 'failed to set up port forwarding', details: 'iptables' }, exit: 1 });
    await assert.rejects(manager.setup(request()), (e) => {
      assert.equal((e as Error).message, `failed to setup network for sandbox "${ID}": plugin type="fake-b" failed (add): failed to set up port forwarding; iptables`);
      return true;
    });
    assert.deepEqual(await fake.calls(), ['fake-a ADD', 'fake-b ADD', 'fake-b DEL', 'fake-a DEL']);
    const delB = await fake.stdin(3);
    assert.equal(delB.prevResult, undefined, 'a failed ADD has no result to hand to DEL');
    assert.deepEqual((delB.runtimeConfig as { portMappings: unknown }).portMappings, [{ hostPort: 8080, containerPort: 80, protocol: 'tcp' }]);
    assert.equal(await manager.status(ID), undefined);
    assert.deepEqual(await manager.attachedSandboxes(), []);
  });

  it('owes no DEL to a plugin that could not be found', async () => {
    await writeConf('1.0.0', [{ type: 'fake-a' }, { type: 'no-such-plugin' }]);
    await fake.answer('fake-a', 'ADD', { out: bridgeResult });
    await assert.rejects(
      manager.setup(request()),
      (e) =>
        (e as Error).message ===
        `failed to setup network for sandbox "${ID}": plugin type="no-such-plugin" failed (add): failed to find plugin "no-such-plugin" in path [${fake.binDir}]`,
    );
    assert.deepEqual(await fake.calls(), ['fake-a ADD', 'fake-a DEL']);
    assert.deepEqual(await manager.attachedSandboxes(), []);
  });

  it('keeps the attachment record when cleanup DEL fails, so a later teardown finishes it', async () => {
    await writeConf('1.0.0', twoPlugins);
    await fake.answer('fake-a', 'ADD', { out: bridgeResult });
    await fake.answer('fake-b', 'ADD', { out: { code: 1, msg: 'nope' }, exit: 1 });
    await fake.answer('fake-a', 'DEL', { out: { code: 11, msg: 'busy' }, exit: 1 });
    await assert.rejects(manager.setup(request()), /plugin type="fake-b" failed \(add\): nope/);
    assert.deepEqual(await manager.attachedSandboxes(), [ID]);
    await assert.rejects(manager.teardown({ sandboxId: ID, netnsPath: SELF_NETNS }), (e) => {
      assert.equal((e as Error).message, `failed to teardown network for sandbox "${ID}": plugin type="fake-a" failed (delete): busy`);
      assert.ok(isKind(e, 'Unavailable'));
      return true;
    });
    await fake.clearAnswer('fake-a', 'DEL');
    await manager.teardown({ sandboxId: ID, netnsPath: SELF_NETNS });
    // fake-b's DEL succeeded during cleanup, so only fake-a is still owed one.
    assert.deepEqual(await fake.calls(), ['fake-a ADD', 'fake-b ADD', 'fake-b DEL', 'fake-a DEL', 'fake-a DEL', 'fake-a DEL']);
    assert.deepEqual(await manager.attachedSandboxes(), []);
  });

  it('does not keep a record only because the failing plugin also fails its DEL', async () => {
    await writeConf('1.0.0', twoPlugins);
    await fake.answer('fake-a', 'ADD', { out: bridgeResult });
    await fake.answer('fake-b', 'ADD', { out: { code: 7, msg: 'bad config' }, exit: 1 });
    await fake.answer('fake-b', 'DEL', { out: { code: 7, msg: 'bad config' }, exit: 1 });
    await assert.rejects(manager.setup(request()), /plugin type="fake-b" failed \(add\): bad config/);
    assert.deepEqual(await fake.calls(), ['fake-a ADD', 'fake-b ADD', 'fake-b DEL', 'fake-a DEL']);
    assert.deepEqual(await manager.attachedSandboxes(), []);
  });

  it('tears down in reverse with the cached result and config, after a restart and a config change', async () => {
    await writeConf('1.0.0', twoPlugins);
    await fake.answer('fake-a', 'ADD', { out: bridgeResult });
    await fake.answer('fake-b', 'ADD', { out: bridgeResult });
    await manager.setup(request());
    await rm(join(confDir, '10-test.conflist'));
    await writeConf('1.0.0', [{ type: 'fake-c' }], {}, '20-other.conflist');

    const restarted = newManager();
    await restarted.teardown({ sandboxId: ID, netnsPath: join(fake.root, 'gone-netns') });
    assert.deepEqual((await fake.calls()).slice(2), ['fake-b DEL', 'fake-a DEL']);
    const delB = await fake.stdin(3);
    assert.deepEqual(delB.prevResult, bridgeResult);
    assert.deepEqual((delB.runtimeConfig as { portMappings: unknown }).portMappings, [{ hostPort: 8080, containerPort: 80, protocol: 'tcp' }]);
    assert.equal((await fake.env(3)).CNI_NETNS, '', 'a vanished netns is passed as empty');
    assert.equal((await fake.env(3)).CNI_ARGS.includes('K8S_POD_NAME=web'), true);

    await restarted.teardown({ sandboxId: ID, netnsPath: SELF_NETNS });
    assert.equal((await fake.calls()).length, 4, 'a second teardown has nothing left to delete');
  });

  it('gives DEL no prevResult below spec 0.4.0', async () => {
    await writeConf('0.3.1', [{ type: 'fake-a' }]);
    await fake.answer('fake-a', 'ADD', { out: { ...bridgeResult, cniVersion: '0.3.1' } });
    await manager.setup(request());
    await manager.teardown({ sandboxId: ID, netnsPath: SELF_NETNS });
    assert.equal((await fake.stdin(2)).prevResult, undefined);
  });

  it('runs CHECK with the cached result, honours disableCheck, refuses before 0.4.0', async () => {
    await writeConf('1.0.0', twoPlugins);
    await fake.answer('fake-a', 'ADD', { out: bridgeResult });
    await fake.answer('fake-b', 'ADD', { out: bridgeResult });
    await assert.rejects(manager.check({ sandboxId: ID, netnsPath: SELF_NETNS }), (e) => isKind(e, 'NotFound'));
    await manager.setup(request());
    await manager.check({ sandboxId: ID, netnsPath: SELF_NETNS });
    assert.deepEqual((await fake.calls()).slice(2), ['fake-a CHECK', 'fake-b CHECK']);
    assert.deepEqual((await fake.stdin(4)).prevResult, bridgeResult);
    await fake.answer('fake-b', 'CHECK', { out: { code: 999, msg: 'port mapping missing' }, exit: 1 });
    await assert.rejects(
      manager.check({ sandboxId: ID, netnsPath: SELF_NETNS }),
      { message: `failed to check network for sandbox "${ID}": plugin type="fake-b" failed (check): port mapping missing` },
    );
    await manager.teardown({ sandboxId: ID, netnsPath: SELF_NETNS });

    await writeConf('1.0.0', twoPlugins, { disableCheck: true });
    await manager.setup(request());
    const before = (await fake.calls()).length;
    await manager.check({ sandboxId: ID, netnsPath: SELF_NETNS });
    assert.equal((await fake.calls()).length, before);
    await manager.teardown({ sandboxId: ID, netnsPath: SELF_NETNS });

    await writeConf('0.3.1', twoPlugins);
    await manager.setup(request());
    await assert.rejects(manager.check({ sandboxId: ID, netnsPath: SELF_NETNS }), /does not support the CHECK command/);
  });

  it('refuses bad input before any plugin runs', async () => {
    await writeConf('1.0.0', twoPlugins);
    await assert.rejects(manager.setup(request({ annotations: { 'kubernetes.io/ingress-bandwidth': '10' } })), (e) => {
      assert.ok(isKind(e, 'InvalidArgument'));
      assert.match((e as Error).message, /^failed to setup network for sandbox "4f1c0a2b3c4d": annotation kubernetes.io\/ingress-bandwidth="10": resource is unreasonably small/);
      return true;
    });
    await assert.rejects(manager.setup(request({ netnsPath: join(fake.root, 'no-netns') })), /is not a network namespace/);
    await assert.rejects(manager.setup(request({ sandboxId: '../x' })), /invalid sandbox ID/);
    assert.deepEqual(await fake.calls(), []);
    assert.deepEqual(await readdir(join(fake.root, 'cache')).catch(() => []), []);
  });

  it('fails setup with the readiness reason when there is no config', async () => {
    await assert.rejects(manager.setup(request()), (e) => {
      assert.ok(isKind(e, 'FailedPrecondition'));
      assert.match((e as Error).message, /^failed to setup network for sandbox "4f1c0a2b3c4d": cni config uninitialized/);
      return true;
    });
  });

  it('refuses a second setup of the same sandbox', async () => {
    await writeConf('1.0.0', [{ type: 'fake-a' }]);
    await manager.setup(request());
    await assert.rejects(manager.setup(request()), (e) => isKind(e, 'AlreadyExists'));
  });

  it('validates the plugins of the current network with VERSION', async () => {
    await writeConf('1.1.0', [{ type: 'fake-a' }, { type: 'missing' }]);
    const problems = await manager.validateNetwork();
    assert.equal(problems.length, 2);
    assert.match(problems[0]!, /plugin type="fake-a" does not support config version "1.1.0"/);
    assert.match(problems[1]!, /plugin type="missing": failed to find plugin/);
  });
});
