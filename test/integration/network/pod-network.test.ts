/**
 * Pod networking against the real Debian CNI plugins (bridge, host-local, portmap from /usr/lib/cni),
 * each test in its own bridge, range and dirs. Traffic only goes to addresses inside namespaces the
 * test created, or to host ports those pods publish.
 */
import assert from 'node:assert/strict';
import { access, copyFile, mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { randomInt } from 'node:crypto';
import { execa } from 'execa';
import { isMountPoint } from '../../../src/platform/mount.js';
import { isNetns } from '../../../src/network/netns.js';
import { execInNetns, netnsInterfaceStats, spawnInNetns } from '../../../src/network/netns-exec.js';
import { PodNetworkManager } from '../../../src/network/pod-network.js';
import { silentLogger } from '../../../src/common/logger.js';
import { bridgePorts, iptablesLinesMentioning, linkExists, purgeIptables, skipReason, TestNet, type Attached } from './host-net.js';
import { eventually } from '../../helpers/wait.js';

const exists = (path: string) => access(path).then(() => true, () => false);

async function ping(ip: string, fromNetns?: string): Promise<boolean> {
  const argv = ['busybox', 'ping', '-c', '1', '-W', '1', ip];
  if (fromNetns) return (await execInNetns(fromNetns, argv, { timeoutMs: 5000 })).exitCode === 0;
  return (await execa(argv[0]!, argv.slice(1), { reject: false, timeout: 5000 })).exitCode === 0;
}

async function httpGet(url: string): Promise<string> {
  const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
  return res.text();
}

describe('network (real CNI plugins)', function () {
  this.timeout(60_000);
  let net: TestNet;

  before(function () {
    const reason = skipReason();
    if (reason) {
      console.log(`    skipping real-network tests: ${reason}`);
      this.skip();
    }
  });

  beforeEach(async () => {
    net = await TestNet.create();
  });

  afterEach(async function () {
    if (!net) return;
    const leftovers = await net.cleanup();
    // A passing test must not have needed the safety net.
    if (this.currentTest?.state === 'passed' && leftovers.length) throw new Error(`test left things behind: ${leftovers.join('; ')}`);
  });

  /** No IP reserved, no iptables rule naming the pod, no veth on the bridge, no pin. */
  async function assertNothingLeft(pod: { sandboxId: string; netnsPath: string }): Promise<void> {
    assert.deepEqual(await net.reservedIps(), [], 'host-local released the IP');
    assert.deepEqual(await iptablesLinesMentioning([pod.sandboxId]), [], 'no iptables rule names the pod');
    assert.deepEqual(await bridgePorts(net.bridge), [], 'no veth left on the bridge');
    assert.equal(await exists(pod.netnsPath), false, 'netns pin removed');
    assert.equal(await isMountPoint(pod.netnsPath), false, 'netns unmounted');
    assert.deepEqual(await net.manager.attachedSandboxes(), [], 'no attachment recorded');
  }

  it('safety net: removes a pod chain the runtime left behind, with the jump to it that names neither pod nor subnet', async () => {
    // As the bridge plugin writes them: a per-pod chain matching the subnet, and a POSTROUTING jump by the pod's IP.
    const chain = `CNI-${Buffer.from(net.name).toString('hex').padEnd(24, '0').slice(0, 24)}`;
    const ip = `${net.prefix}.21`;
    const script = ['*nat', `:${chain} - [0:0]`, `-A ${chain} -d ${net.subnet} -j ACCEPT`, `-A POSTROUTING -s ${ip}/32 -j ${chain}`, 'COMMIT', ''].join('\n');
    await execa('iptables-restore', ['--noflush'], { input: script });
    try {
      assert.equal((await iptablesLinesMentioning([chain])).length, 3);
      assert.equal(await purgeIptables([net.subnet]), 2);
      assert.deepEqual(await iptablesLinesMentioning([chain]), [], 'the chain and the jump to it are gone');
    } finally {
      await execa('iptables', ['-t', 'nat', '-D', 'POSTROUTING', '-s', `${ip}/32`, '-j', chain], { reject: false });
      await execa('iptables', ['-t', 'nat', '-F', chain], { reject: false });
      await execa('iptables', ['-t', 'nat', '-X', chain], { reject: false });
    }
  });

  it('pins a namespace that outlives the process that made it, with lo up', async () => {
    const path = await net.manager.createNetns('pin-test');
    net.sandboxes.set('pin-test', path);
    assert.equal(await isNetns(path), true);
    assert.equal(await isMountPoint(path), true);
    const links = await execInNetns(path, ['ip', '-o', 'link', 'show']);
    assert.match(links.stdout, /^1: lo: <LOOPBACK,UP,LOWER_UP>/);
    assert.doesNotMatch(links.stdout, /^2:/m, 'nothing but lo yet');
    await assert.rejects(net.manager.createNetns('pin-test'), /already exists/);
    await net.manager.removeNetns(path);
    assert.equal(await exists(path), false);
    assert.equal(await isMountPoint(path), false);
    await net.manager.removeNetns(path);
    await assert.rejects(net.manager.removeNetns('/etc/passwd'), /is not under/);
  });

  it('pins the network namespace a process made for itself, which outlives it, and attaches it', async () => {
    await net.writeConf();
    // A process with a netns of its own (as a pause container in a user namespace makes).
    const proc = execa('unshare', ['--net', 'sleep', '60'], { reject: false });
    try {
      await eventually('the process has its own netns', async () => (await execa('readlink', [`/proc/${proc.pid}/ns/net`])).stdout !== (await execa('readlink', ['/proc/self/ns/net'])).stdout);
      const path = await net.manager.pinNetns('pin-own', `/proc/${proc.pid}/ns/net`);
      net.sandboxes.set('pin-own', path);
      assert.equal(await isNetns(path), true);
      assert.equal((await execa('stat', ['-L', '-c', '%i', path])).stdout, (await execa('stat', ['-L', '-c', '%i', `/proc/${proc.pid}/ns/net`])).stdout);
      await assert.rejects(net.manager.pinNetns('pin-own', `/proc/${proc.pid}/ns/net`), /already exists/);
      await assert.rejects(net.manager.pinNetns('pin-bad', '/etc/passwd'), /is not a network namespace/);
      assert.equal(await exists(join(dirname(path), 'pin-bad')), false, 'a refused pin leaves no file');
      proc.kill('SIGKILL');
      await proc;
      const result = await net.manager.setup(net.request('pin-own', path));
      assert.equal(await ping(result.primaryIp), true, 'the host pings the pod in the pinned namespace');
      await net.manager.teardown({ sandboxId: 'pin-own', netnsPath: path });
      await net.manager.removeNetns(path);
      await assertNothingLeft({ sandboxId: 'pin-own', netnsPath: path });
    } finally {
      proc.kill('SIGKILL');
    }
  });

  it('gives a pod an IP in the range that the host can ping, and tears it down after a restart', async () => {
    await net.writeConf();
    const pod = await net.attach();
    assert.ok(pod.ip.startsWith(`${net.prefix}.`), `${pod.ip} in ${net.subnet}`);
    assert.deepEqual(await net.reservedIps(), [pod.ip]);
    assert.equal(await ping(pod.ip), true, 'host pings the pod');
    assert.equal((await bridgePorts(net.bridge)).length, 1);
    assert.notDeepEqual(await iptablesLinesMentioning([pod.sandboxId]), [], 'ipMasq rules name the pod');

    const stats = await netnsInterfaceStats(pod.netnsPath, 'eth0');
    assert.ok(stats.rxBytes > 0n && stats.txBytes > 0n, 'the ping shows in eth0 counters');
    const status = await net.manager.status(pod.sandboxId);
    assert.equal(status?.primaryIp, pod.ip);

    // A new manager over the same dirs is a restarted daemon: the pin and the cached ADD are on disk.
    const restarted = new PodNetworkManager({
      cniConfDir: net.confDir,
      cniBinDirs: ['/usr/lib/cni'],
      cniTimeoutSeconds: 30,
      netnsDir: join(net.dir, 'netns'),
      cacheDir: join(net.dir, 'cache'),
      log: silentLogger,
    });
    await restarted.check({ sandboxId: pod.sandboxId, netnsPath: pod.netnsPath });
    await restarted.teardown({ sandboxId: pod.sandboxId, netnsPath: pod.netnsPath });
    await restarted.removeNetns(pod.netnsPath);
    await assertNothingLeft(pod);
  });

  it('lets two pods reach each other', async () => {
    await net.writeConf();
    const a = await net.attach();
    const b = await net.attach();
    assert.notEqual(a.ip, b.ip);
    assert.equal(await ping(b.ip, a.netnsPath), true, 'a pings b');
    assert.equal(await ping(a.ip, b.netnsPath), true, 'b pings a');
    await net.detach(a);
    await net.detach(b);
    await assertNothingLeft(a);
    await assertNothingLeft(b);
  });

  it('serves HTTP from a pod to the host, directly and through a host port', async () => {
    await net.writeConf();
    const hostPort = 30000 + randomInt(10000);
    const pod = await net.attach({ portMappings: [{ hostPort, containerPort: 8080, protocol: 'TCP' }] });
    const www = join(net.dir, 'www');
    await mkdir(www);
    const token = `stove-${pod.sandboxId.slice(0, 12)}`;
    await writeFile(join(www, 'index.html'), token);
    net.processes.push(spawnInNetns(pod.netnsPath, ['busybox', 'httpd', '-f', '-p', '8080', '-h', www], { stdio: ['ignore', 'ignore', 'ignore'] }));

    await eventually('httpd in the pod', async () => (await httpGet(`http://${pod.ip}:8080/`)) === token);
    // portmap's DNAT covers locally generated traffic too; with snat (the default) it sets
    // route_localnet on the bridge, so even the host's loopback reaches the pod.
    assert.equal(await httpGet(`http://127.0.0.1:${hostPort}/`), token, 'host loopback:hostPort');
    assert.equal(await httpGet(`http://${net.gateway}:${hostPort}/`), token, 'bridge address:hostPort');
    const { stdout: localnet } = await execa('sysctl', ['-n', `net.ipv4.conf.${net.bridge}.route_localnet`]);
    assert.equal(localnet.trim(), '1');
    assert.ok((await iptablesLinesMentioning([`--dport ${hostPort}`])).length > 0, 'DNAT rule for the host port');

    await net.detach(pod);
    assert.deepEqual(await iptablesLinesMentioning([`--dport ${hostPort}`]), [], 'DNAT rules gone');
    await assert.rejects(httpGet(`http://127.0.0.1:${hostPort}/`));
    await assertNothingLeft(pod);
  });

  it('shapes traffic from the bandwidth annotations (bandwidth capability)', async () => {
    const bandwidth = { type: 'bandwidth', capabilities: { bandwidth: true } };
    await net.writeConf([net.bridgePlugin(), bandwidth, TestNet.portmapPlugin()]);
    const pod = await net.attach({ annotations: { 'kubernetes.io/ingress-bandwidth': '10M', 'kubernetes.io/egress-bandwidth': '5M' } });
    const [hostVeth] = await bridgePorts(net.bridge);
    const { stdout: ingress } = await execa('tc', ['qdisc', 'show', 'dev', hostVeth!]);
    assert.match(ingress, /qdisc tbf .* rate 10Mbit/, 'traffic to the pod is shaped on the host veth');
    const ifb = (await net.manager.status(pod.sandboxId))!.result.interfaces!.find((i) => i.name.startsWith('bwp'))!;
    const { stdout: egress } = await execa('tc', ['qdisc', 'show', 'dev', ifb.name]);
    assert.match(egress, /qdisc tbf .* rate 5Mbit/, 'traffic from the pod is shaped on the ifb device');
    await net.detach(pod);
    assert.equal(await linkExists(ifb.name), false, 'ifb device removed');
    await assertNothingLeft(pod);
  });

  it('reports a missing plugin Kubernetes-style and leaves nothing behind', async () => {
    await net.writeConf([net.bridgePlugin(), { type: 'stove-no-such-plugin' }]);
    let attempted: Attached | undefined;
    const id = (m: string) => /sandbox "([0-9a-f]{64})"/.exec(m)?.[1];
    await assert.rejects(net.attach(), (e) => {
      const message = (e as Error).message;
      const sandboxId = id(message)!;
      attempted = { sandboxId, netnsPath: join(net.dir, 'netns', sandboxId), ip: '' };
      assert.equal(
        message,
        `failed to setup network for sandbox "${sandboxId}": plugin type="stove-no-such-plugin" failed (add): failed to find plugin "stove-no-such-plugin" in path [/usr/lib/cni]`,
      );
      return true;
    });
    // bridge ran first (it made the bridge and a veth, took an IP, added masquerade rules); its DEL undid
    // all but the bridge device, which the bridge plugin never deletes.
    await assertNothingLeft(attempted!);
    assert.equal(await linkExists(net.bridge), true);
  });

  it('passes a plugin error message through and leaves nothing behind', async () => {
    await net.writeConf([net.bridgePlugin(), TestNet.portmapPlugin({ markMasqBit: 99 })]);
    let attempted: Attached | undefined;
    await assert.rejects(net.attach({ portMappings: [{ hostPort: 31999, containerPort: 80, protocol: 'TCP' }] }), (e) => {
      const message = (e as Error).message;
      const sandboxId = /sandbox "([0-9a-f]{64})"/.exec(message)![1]!;
      attempted = { sandboxId, netnsPath: join(net.dir, 'netns', sandboxId), ip: '' };
      assert.equal(
        message,
        `failed to setup network for sandbox "${sandboxId}": plugin type="portmap" failed (add): failed to parse config: MasqMarkBit must be between 0 and 31`,
      );
      return true;
    });
    await assertNothingLeft(attempted!);
  });

  it('creates nothing when the first plugin cannot be found', async () => {
    await net.writeConf([{ type: 'stove-no-such-plugin', bridge: net.bridge }]);
    await assert.rejects(net.attach(), /plugin type="stove-no-such-plugin" failed \(add\): failed to find plugin/);
    assert.equal(await linkExists(net.bridge), false, 'no bridge');
    assert.deepEqual(await net.manager.listNetns(), []);
  });

  it('deletes idempotently, also after the netns is gone', async () => {
    // bridge 1.1 removes its ipMasq rules only while the pod's eth0 exists (it reads the addresses
    // from the link), so with the netns gone first those rules would stay: no ipMasq here.
    await net.writeConf([net.bridgePlugin({ ipMasq: false }), TestNet.portmapPlugin()]);
    const hostPort = 30000 + randomInt(10000);
    const pod = await net.attach({ portMappings: [{ hostPort, containerPort: 80, protocol: 'TCP' }] });
    assert.ok((await iptablesLinesMentioning([pod.sandboxId])).length > 0, 'portmap rules name the pod');
    const record = join(net.dir, 'cache', `${pod.sandboxId}-eth0.json`);
    await copyFile(record, `${record}.saved`);

    await net.manager.removeNetns(pod.netnsPath);
    await net.manager.teardown({ sandboxId: pod.sandboxId, netnsPath: pod.netnsPath });
    assert.deepEqual(await net.reservedIps(), []);
    assert.deepEqual(await iptablesLinesMentioning([pod.sandboxId]), []);

    // The same DEL once more, through the real plugins, on nothing left to delete.
    await copyFile(`${record}.saved`, record);
    await net.manager.teardown({ sandboxId: pod.sandboxId, netnsPath: pod.netnsPath });
    await net.manager.teardown({ sandboxId: pod.sandboxId, netnsPath: pod.netnsPath });
    await assertNothingLeft(pod);
  });

  it('CHECK passes for a healthy pod and reports a broken one', async () => {
    await net.writeConf([net.bridgePlugin({ ipMasq: false }), TestNet.portmapPlugin()]);
    const pod = await net.attach();
    await net.manager.check({ sandboxId: pod.sandboxId, netnsPath: pod.netnsPath });
    await execInNetns(pod.netnsPath, ['ip', 'link', 'del', 'eth0']);
    await assert.rejects(net.manager.check({ sandboxId: pod.sandboxId, netnsPath: pod.netnsPath }), (e) => {
      assert.equal((e as Error).message, `failed to check network for sandbox "${pod.sandboxId}": plugin type="bridge" failed (check): Interface name eth0 not found`);
      return true;
    });
    await net.detach(pod);
    await assertNothingLeft(pod);
  });

  it('flips NetworkReady when a config appears, without a restart', async () => {
    const before = await net.manager.readiness();
    assert.equal(before.ready, false);
    assert.equal(before.reason, 'NetworkPluginNotReady');
    assert.match(before.message, /^cni config uninitialized/);
    await net.writeConf();
    assert.equal((await net.manager.readiness()).ready, true);
  });

  it('runs a command inside the pod netns with piped stdio (the port-forward path)', async () => {
    await net.writeConf();
    const pod = await net.attach();
    net.processes.push(
      spawnInNetns(pod.netnsPath, ['socat', 'TCP-LISTEN:7777,bind=127.0.0.1,reuseaddr,fork', 'EXEC:cat'], { stdio: ['ignore', 'ignore', 'ignore'] }),
    );
    // 127.0.0.1:7777 exists only inside the pod; socat there bridges stdin/stdout to it.
    await eventually('the echo server', async () => {
      const r = await execInNetns(pod.netnsPath, ['socat', '-T', '2', '-', 'TCP:127.0.0.1:7777'], { input: 'ping-pong\n', timeoutMs: 5000 });
      return r.stdout === 'ping-pong\n';
    });
    const outside = await execa('socat', ['-T', '1', '-', 'TCP:127.0.0.1:7777,connect-timeout=1'], { input: 'x', reject: false });
    assert.notEqual(outside.exitCode, 0, 'not reachable from the host namespace');
    await net.detach(pod);
    await assertNothingLeft(pod);
  });
});
