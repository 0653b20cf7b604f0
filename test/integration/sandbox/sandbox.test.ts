/**
 * Pod sandboxes through the CRI against a real `stove serve`: pause containers under real runc and
 * conmon, networked by the Debian CNI plugins in the test's own bridge and range. Traffic goes only to
 * addresses inside namespaces the tests created and to host ports those pods publish.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { access, mkdir, readdir, readFile, readlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { randomInt } from 'node:crypto';
import { execa } from 'execa';
import { NamespaceMode, PodSandboxState, Protocol, SecurityProfile_ProfileType } from '../../../src/gen/runtime/v1/api.js';
import { cgroupDirs, detectCgroups } from '../../../src/platform/cgroups.js';
import { capabilitiesFromMask } from '../../../src/platform/proc.js';
import { execInNetns, spawnInNetns } from '../../../src/network/netns-exec.js';
import { isMountPoint } from '../../../src/platform/mount.js';
import { suiteHooks } from '../../helpers/suite.js';
import { iptablesLinesMentioning, nsInode, pidAlive, PodWorld, rejectsWith, skipReason, eventually } from './world.js';

/** The lowest OOM score the daemon gives: any with CAP_SYS_RESOURCE, else its own. */
async function daemonOomFloor(pid: number): Promise<{ floor: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const capEff = /^CapEff:\s*([0-9a-f]+)$/m.exec(status)?.[1] ?? '0';
  if (capabilitiesFromMask(capEff).includes('CAP_SYS_RESOURCE')) return { floor: -1000 };
  return { floor: Number(await readFile(`/proc/${pid}/oom_score_adj`, 'utf8')) };
}

const exists = (p: string) => access(p).then(() => true, () => false);

async function ping(ip: string, fromNetns?: string): Promise<boolean> {
  const argv = ['busybox', 'ping', '-c', '1', '-W', '1', ip];
  if (fromNetns) return (await execInNetns(fromNetns, argv, { timeoutMs: 5000 })).exitCode === 0;
  return (await execa(argv[0]!, argv.slice(1), { reject: false, timeout: 5000 })).exitCode === 0;
}

/** The message of a failed call. */
async function failureOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    return (err as { details: string }).details;
  }
  throw new Error('the call succeeded');
}

/** The mountinfo line of `mountPoint` in process `pid`'s mount namespace. */
async function mountLine(pid: number | 'self', mountPoint: string): Promise<string | undefined> {
  const text = await readFile(`/proc/${pid}/mountinfo`, 'utf8');
  return text.split('\n').find((l) => l.split(' ')[4] === mountPoint);
}

/** Whether process `holder` has an fd open on /proc/<pid>/statm (the pause liveness probe). */
async function holdsStatmOf(holder: number, pid: number): Promise<boolean> {
  const dir = `/proc/${holder}/fd`;
  const links = await Promise.all((await readdir(dir)).map((fd) => readlink(join(dir, fd)).catch(() => '')));
  return links.includes(`/proc/${pid}/statm`);
}

describe('pod sandboxes (real runc, conmon and CNI)', function () {
  this.timeout(60_000);
  const world = new PodWorld();
  const daemonHoldsStatmOf = (pid: number) => holdsStatmOf(world.daemon.child.pid!, pid);

  suiteHooks({
    what: 'pod sandbox tests',
    skipReason,
    setup: () => world.start(),
    tidy: () => world.removeAllPods().catch(() => {}),
    leftovers: () => world.leftovers(),
    cleanup: () => world.cleanup(),
  });

  it('runs a pod the host can ping, whose pause process holds its namespaces, and stops and removes it', async () => {
    const before = BigInt(Date.now()) * 1_000_000n;
    const config = world.pod({
      hostname: 'web-0',
      labels: { app: 'web' },
      annotations: { 'example.com/note': 'x' },
      dnsConfig: { servers: ['10.96.0.10'], searches: ['stove-it.svc.cluster.local', 'svc.cluster.local'], options: ['ndots:5'] },
      linux: { sysctls: { 'net.ipv4.ip_local_port_range': '20000 30000' }, securityContext: { namespaceOptions: { pid: NamespaceMode.POD } } },
    });
    const id = await world.run(config);
    const { status } = await world.status(id);
    const st = status!;
    assert.equal(st.id, id);
    assert.equal(st.state, PodSandboxState.SANDBOX_READY);
    assert.ok(st.createdAt >= before && st.createdAt <= BigInt(Date.now()) * 1_000_000n, 'created_at in ns');
    assert.ok(st.network!.ip.startsWith(`${world.net.prefix}.`), `${st.network!.ip} in ${world.net.subnet}`);
    assert.deepEqual(st.labels, { app: 'web' });
    assert.deepEqual(st.annotations, { 'example.com/note': 'x' });
    assert.deepEqual(st.metadata, config.metadata);
    assert.equal(st.linux!.namespaces!.options!.pid, NamespaceMode.POD);
    assert.equal(st.runtimeHandler, '');
    assert.equal(await ping(st.network!.ip), true, 'the host pings the pod');

    const info = await world.info(id);
    const pid = info.pid;
    assert.ok(pid > 0 && (await pidAlive(pid)));
    assert.equal(await daemonHoldsStatmOf(pid), true, 'status checks the pause process through a held /proc statm fd');
    assert.deepEqual(info.runtimeSpec.process.args, ['/bin/pause']);
    assert.equal(info.runtimeSpec.root.readonly, true);
    // The pause process joined the pinned netns and holds new IPC, UTS and PID namespaces (it is PID 1).
    assert.equal(await nsInode(`/proc/${pid}/ns/net`), await nsInode(info.netnsPath));
    for (const ns of ['ipc', 'uts', 'pid'])
      assert.notEqual(await nsInode(`/proc/${pid}/ns/${ns}`), await nsInode(`/proc/self/ns/${ns}`), `own ${ns} namespace`);
    assert.match(await readFile(`/proc/${pid}/status`, 'utf8'), /^NSpid:\s+\d+\s+1$/m);
    const { stdout: hostname } = await execa('nsenter', [`--uts=/proc/${pid}/ns/uts`, 'hostname']);
    assert.equal(hostname, 'web-0');
    assert.match((await mountLine(pid, '/'))!, / ro[, ]/, 'read-only root');
    // OOM score -998; raised to what the daemon itself has only where it lacks CAP_SYS_RESOURCE.
    const { floor: oomFloor } = await daemonOomFloor(world.daemon.child.pid!);
    assert.equal(Number(await readFile(`/proc/${pid}/oom_score_adj`, 'utf8')), Math.max(-998, oomFloor));
    // The pod's cgroup: <default parent>/<id>, with minimal CPU shares.
    const cgroupsPath = `${world.cgroupRoot}/${id}`;
    assert.match(await readFile(`/proc/${pid}/cgroup`, 'utf8'), new RegExp(`:${cgroupsPath}$`, 'm'));
    const layout = await detectCgroups();
    const dirs = cgroupDirs(layout, cgroupsPath);
    if (layout.version === 1) assert.equal((await readFile(join(dirs.cpu!, 'cpu.shares'), 'utf8')).trim(), '2');
    // Sysctls: the pod's, plus the unprivileged-port default.
    const sysctl = async (name: string) => (await execInNetns(info.netnsPath, ['cat', `/proc/sys/${name}`])).stdout.trim();
    assert.equal(await sysctl('net/ipv4/ip_local_port_range'), '20000\t30000');
    assert.equal(await sysctl('net/ipv4/ip_unprivileged_port_start'), '0');

    // Pod files for the containers: hostname, resolv.conf from the DNS config, hosts, a 64 MiB shm.
    const files = info.podFiles as { hostnamePath: string; resolvConfPath: string; hostsPath: string; shmPath: string };
    assert.equal(await readFile(files.hostnamePath, 'utf8'), 'web-0\n');
    assert.equal(
      await readFile(files.resolvConfPath, 'utf8'),
      'search stove-it.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n',
    );
    assert.ok(await exists(files.hostsPath));
    const shm = (await mountLine('self', files.shmPath))!;
    assert.match(shm, /nosuid,nodev,noexec/);
    assert.match(shm, / - tmpfs shm .*size=65536k/);
    assert.ok(await exists(config.logDirectory), 'log directory created');

    await world.runtime.stopPodSandbox({ podSandboxId: id });
    const stopped = (await world.status(id)).status!;
    assert.equal(stopped.state, PodSandboxState.SANDBOX_NOTREADY);
    assert.equal(stopped.network!.ip, '');
    assert.equal(await pidAlive(pid), false, 'pause process gone');
    assert.equal(await daemonHoldsStatmOf(pid), false, 'its /proc statm fd closed');
    assert.equal(await exists(info.netnsPath), false, 'netns unpinned');
    assert.equal(await isMountPoint(files.shmPath), false, 'shm unmounted');
    assert.equal(await ping(st.network!.ip), false);
    await world.runtime.removePodSandbox({ podSandboxId: id });
    await rejectsWith(world.status(id), 'NOT_FOUND', /not found/);
    assert.deepEqual(await world.leftovers(), []);
    assert.deepEqual(await iptablesLinesMentioning([id]), [], 'no iptables rule names the pod');
  });

  it('lets two pods reach each other; the security context applies to the pause process', async () => {
    const a = await world.run(
      world.pod({ linux: { securityContext: { runAsUser: { value: 65534n }, runAsGroup: { value: 65534n }, seccomp: { profileType: SecurityProfile_ProfileType.RuntimeDefault } } } }),
    );
    const b = await world.run(world.pod({ linux: { securityContext: { privileged: true } } }));
    const [ia, ib] = await Promise.all([world.info(a), world.info(b)]);
    const procStatus = async (pid: number) => readFile(`/proc/${pid}/status`, 'utf8');
    assert.match(await procStatus(ia.pid), /^Uid:\s+65534\s/m, 'run_as_user');
    assert.match(await procStatus(ia.pid), /^Gid:\s+65534\s/m, 'run_as_group');
    assert.match(await procStatus(ia.pid), /^Seccomp:\s+2$/m, 'RuntimeDefault seccomp filter');
    assert.match(await procStatus(ib.pid), /^Seccomp:\s+0$/m, 'privileged: no seccomp');
    assert.equal(ib.runtimeSpec.linux.maskedPaths, undefined, 'privileged: nothing masked');
    // Every pause asked for -998; the daemon may not go below its own score and says so once, not per pod.
    const { floor: oomFloor } = await daemonOomFloor(world.daemon.child.pid!);
    const warnings = world.daemon.output().split('\n').filter((l) => l.includes('oom_score_adj below the daemon'));
    assert.equal(warnings.length, oomFloor > -998 ? 1 : 0);
    const ipA = (await world.status(a)).status!.network!.ip;
    const ipB = (await world.status(b)).status!.network!.ip;
    assert.notEqual(ipA, ipB);
    assert.equal(await ping(ipB, ia.netnsPath), true, 'a pings b');
    assert.equal(await ping(ipA, ib.netnsPath), true, 'b pings a');
  });

  it('publishes a host port reachable on the host loopback', async () => {
    const hostPort = 30000 + randomInt(10000);
    const id = await world.run(world.pod({ portMappings: [{ protocol: Protocol.TCP, containerPort: 8080, hostPort }] }));
    const { netnsPath } = await world.info(id);
    const www = join(world.daemon.dir, 'www');
    await mkdir(www, { recursive: true });
    await writeFile(join(www, 'index.html'), `hello from ${id}`);
    const httpd = spawnInNetns(netnsPath, ['busybox', 'httpd', '-f', '-p', '8080', '-h', www], { stdio: ['ignore', 'ignore', 'ignore'] });
    try {
      const get = async () => (await fetch(`http://127.0.0.1:${hostPort}/`, { signal: AbortSignal.timeout(2000) })).text();
      await eventually('the pod\'s httpd through the host port', async () => (await get()) === `hello from ${id}`);
    } finally {
      httpd.kill('SIGKILL');
    }
    await world.runtime.removePodSandbox({ podSandboxId: id });
    assert.deepEqual(await iptablesLinesMentioning([`--dport ${hostPort}`]), [], 'port mapping rules gone');
  });

  it('runs host-network, host-PID and host-IPC pods in the host\'s namespaces, without CNI', async () => {
    const id = await world.run(
      world.pod({ linux: { securityContext: { namespaceOptions: { network: NamespaceMode.NODE, pid: NamespaceMode.NODE, ipc: NamespaceMode.NODE } } } }),
    );
    const { status } = await world.status(id);
    assert.equal(status!.network!.ip, '');
    assert.equal(status!.linux!.namespaces!.options!.network, NamespaceMode.NODE);
    const info = await world.info(id);
    assert.equal(info.netnsPath, '');
    for (const ns of ['net', 'pid', 'ipc', 'uts'])
      assert.equal(await nsInode(`/proc/${info.pid}/ns/${ns}`), await nsInode(`/proc/self/ns/${ns}`), `host ${ns} namespace`);
    assert.equal((info.podFiles as { shmPath: string }).shmPath, '/dev/shm');
    assert.deepEqual(await world.net.reservedIps(), [], 'no IP taken');
  });

  it('runs a pod with its own user namespace on the pod network', async () => {
    const map = [{ hostId: 200000, containerId: 0, length: 65536 }];
    const id = await world.run(
      world.pod({
        linux: {
          sysctls: { 'net.ipv4.ip_local_port_range': '21000 31000', 'net.ipv4.conf.eth0.rp_filter': '2' },
          securityContext: { namespaceOptions: { usernsOptions: { mode: NamespaceMode.POD, uids: map, gids: map } } },
        },
      }),
    );
    const info = await world.info(id);
    assert.match(await readFile(`/proc/${info.pid}/uid_map`, 'utf8'), /^\s*0\s+200000\s+65536$/m);
    assert.match(await readFile(`/proc/${info.pid}/status`, 'utf8'), /^Uid:\s+200000\s/m);
    assert.notEqual(await nsInode(`/proc/${info.pid}/ns/user`), await nsInode('/proc/self/ns/user'));
    // The pause process made the netns inside the pod's user namespace (so the pod's containers may
    // join it) and Stove pinned that one.
    assert.equal(await nsInode(info.netnsPath), await nsInode(`/proc/${info.pid}/ns/net`));
    const sysctl = async (name: string) => (await execInNetns(info.netnsPath, ['cat', `/proc/sys/${name}`])).stdout.trim();
    assert.equal(await sysctl('net/ipv4/ip_local_port_range'), '21000\t31000');
    assert.equal(await sysctl('net/ipv4/ip_unprivileged_port_start'), '0');
    // A sysctl of the pod interface needs CNI first: written from the host once eth0 exists.
    assert.equal(await sysctl('net/ipv4/conf/eth0/rp_filter'), '2');
    assert.equal(await ping((await world.status(id)).status!.network!.ip), true);
  });

  it('refuses bad requests before creating anything', async () => {
    await rejectsWith(world.run(world.pod({ metadata: { name: 'x', namespace: 'y' } })), 'INVALID_ARGUMENT', /config\.metadata\.uid is required/);
    await rejectsWith(world.runtime.runPodSandbox({ config: undefined, runtimeHandler: '' }), 'INVALID_ARGUMENT', /config is required/);
    await rejectsWith(world.run(world.pod(), 'no-such-handler'), 'NOT_FOUND', /no runtime for "no-such-handler" is configured/);
    await rejectsWith(
      world.run(world.pod({ linux: { sysctls: { 'kernel.panic': '1' } } })),
      'INVALID_ARGUMENT',
      /linux\.sysctls: sysctl "kernel\.panic" is not namespaced/,
    );
    await rejectsWith(
      world.run(world.pod({ linux: { sysctls: { 'net.ipv4.ip_forward': '1' }, securityContext: { namespaceOptions: { network: NamespaceMode.NODE } } } })),
      'INVALID_ARGUMENT',
      /would change the host's network namespace/,
    );
    assert.deepEqual((await world.runtime.listPodSandbox({ filter: undefined })).items, []);
  });

  it('answers ALREADY_EXISTS for the same metadata; stop and remove are idempotent', async () => {
    const config = world.pod();
    const id = await world.run(config);
    await rejectsWith(world.run(config), 'ALREADY_EXISTS', new RegExp(`reserved for ${id}`));
    await world.runtime.stopPodSandbox({ podSandboxId: id });
    await world.runtime.stopPodSandbox({ podSandboxId: id });
    await world.runtime.stopPodSandbox({ podSandboxId: 'f'.repeat(64) });
    await world.runtime.removePodSandbox({ podSandboxId: id });
    await world.runtime.removePodSandbox({ podSandboxId: id });
    await world.runtime.removePodSandbox({ podSandboxId: 'f'.repeat(64) });
    await rejectsWith(world.runtime.stopPodSandbox({ podSandboxId: '' }), 'INVALID_ARGUMENT', /pod_sandbox_id is required/);
    // The name is free again.
    await world.run(config);
  });

  it('removes a ready pod in one call, with the cgroup parent levels it brought into being', async () => {
    const parent = `${world.cgroupRoot}/extra/pod-x`;
    const id = await world.run(world.pod({ linux: { cgroupParent: parent } }));
    const { pid } = await world.info(id);
    assert.match(await readFile(`/proc/${pid}/cgroup`, 'utf8'), new RegExp(`:${parent}/${id}$`, 'm'));
    await world.runtime.removePodSandbox({ podSandboxId: id });
    assert.equal(await pidAlive(pid), false);
    assert.deepEqual(await world.leftovers(), []);
  });

  it('keeps a cgroup parent level a pod made while another pod is under it, and removes it with the last one', async () => {
    const level = `${world.cgroupRoot}/shared`;
    const levelDirs = async () => [...new Set(Object.values(cgroupDirs(await detectCgroups(), level)))];
    const a = await world.run(world.pod({ linux: { cgroupParent: `${level}/a` } }));
    const b = await world.run(world.pod({ linux: { cgroupParent: `${level}/b` } }));
    await world.runtime.removePodSandbox({ podSandboxId: a });
    for (const dir of await levelDirs()) assert.ok(existsSync(join(dir, 'b', b)), `${dir}/b/${b.slice(0, 12)} is still there`);
    await world.runtime.removePodSandbox({ podSandboxId: b });
    for (const dir of await levelDirs()) assert.equal(existsSync(dir), false, `${dir} went with the last pod under it`);
    assert.deepEqual(await world.leftovers(), []);
  });

  it('filters ListPodSandbox by id, id prefix, state and labels', async () => {
    const a = await world.run(world.pod({ labels: { app: 'a', tier: 'web' } }));
    const b = await world.run(world.pod({ labels: { app: 'b', tier: 'web' } }));
    await world.runtime.stopPodSandbox({ podSandboxId: b });
    const list = async (filter: object | undefined) => (await world.runtime.listPodSandbox({ filter: filter as never })).items.map((p) => p.id).sort();
    assert.deepEqual(await list(undefined), [a, b].sort());
    assert.deepEqual(await list({ id: a, labelSelector: {} }), [a]);
    assert.deepEqual(await list({ id: b.slice(0, 12), labelSelector: {} }), [b]);
    assert.deepEqual(await list({ id: 'nonexistent', labelSelector: {} }), []);
    assert.deepEqual(await list({ id: '', state: { state: PodSandboxState.SANDBOX_READY }, labelSelector: {} }), [a]);
    assert.deepEqual(await list({ id: '', state: { state: PodSandboxState.SANDBOX_NOTREADY }, labelSelector: {} }), [b]);
    assert.deepEqual(await list({ id: '', labelSelector: { tier: 'web' } }), [a, b].sort());
    assert.deepEqual(await list({ id: '', labelSelector: { tier: 'web', app: 'b' } }), [b]);
    assert.deepEqual(await list({ id: '', labelSelector: { app: 'c' } }), []);
  });

  it('marks a pod NOTREADY when its pause process is killed', async () => {
    const id = await world.run(world.pod());
    const { pid } = await world.info(id);
    assert.equal(await daemonHoldsStatmOf(pid), true);
    process.kill(pid, 'SIGKILL');
    await eventually('NOTREADY', async () => (await world.status(id)).status!.state === PodSandboxState.SANDBOX_NOTREADY, 5000);
    assert.equal(await daemonHoldsStatmOf(pid), false, 'the dead pause process keeps no fd in the daemon');
    await world.runtime.stopPodSandbox({ podSandboxId: id });
    assert.equal((await world.info(id)).processStatus, 'deleted');
  });

  it('reports a broken CNI config Kubernetes-style and leaves nothing behind', async () => {
    await world.net.writeConf([world.net.bridgePlugin(), { type: 'stove-no-such-plugin' }]);
    const config = world.pod();
    try {
      const message = await failureOf(world.run(config));
      const id = /sandbox "([0-9a-f]{64})"/.exec(message)![1]!;
      assert.match(
        message,
        new RegExp(`^failed to setup network for sandbox "${id}": plugin type="stove-no-such-plugin" failed \\(add\\): failed to find plugin "stove-no-such-plugin"`),
      );
      assert.deepEqual(await world.leftovers(), []);
      assert.deepEqual(await iptablesLinesMentioning([id]), []);
      assert.deepEqual(await world.net.reservedIps(), [], 'the IP bridge took is released');
    } finally {
      await world.net.writeConf();
    }
    // The name was released with everything else.
    await world.run(config);
  });

  it('keeps pods across a SIGKILL of the daemon: same state and IP, pause still running, then stop and remove work', async () => {
    const ready = await world.run(world.pod());
    const host = await world.run(world.pod({ linux: { securityContext: { namespaceOptions: { network: NamespaceMode.NODE } } } }));
    const dies = await world.run(world.pod());
    const stopped = await world.run(world.pod());
    await world.runtime.stopPodSandbox({ podSandboxId: stopped });
    const ip = (await world.status(ready)).status!.network!.ip;
    const [pidReady, pidHost, pidDies] = await Promise.all([ready, host, dies].map(async (id) => (await world.info(id)).pid));
    const listBefore = (await world.runtime.listPodSandbox({ filter: undefined })).items;

    await world.daemon.stop('SIGKILL');
    // While Stove is down, one pause process dies; conmon still records it.
    process.kill(pidDies, 'SIGKILL');
    await eventually('pause gone', async () => !(await pidAlive(pidDies)));
    // What a RunPodSandbox interrupted by the kill leaves: a netns pin and a state dir with the shm mount.
    const orphan = 'd'.repeat(64);
    const orphanPin = join(world.daemon.state, 'netns', orphan);
    const orphanDir = join(world.daemon.state, 'sandboxes', orphan);
    await writeFile(orphanPin, '');
    await execa('unshare', [`--net=${orphanPin}`, 'true']);
    await mkdir(join(orphanDir, 'shm'), { recursive: true });
    await execa('mount', ['-t', 'tmpfs', 'shm', join(orphanDir, 'shm')]);
    await world.restart();
    assert.equal(await exists(orphanPin), false, 'orphan netns pin removed at start');
    assert.equal(await exists(orphanDir), false, 'orphan state dir removed at start');

    const listAfter = (await world.runtime.listPodSandbox({ filter: undefined })).items;
    const byId = new Map(listAfter.map((p) => [p.id, p]));
    assert.deepEqual([...byId.keys()].sort(), listBefore.map((p) => p.id).sort());
    assert.equal(byId.get(ready)!.state, PodSandboxState.SANDBOX_READY);
    assert.equal(byId.get(host)!.state, PodSandboxState.SANDBOX_READY);
    assert.equal(byId.get(dies)!.state, PodSandboxState.SANDBOX_NOTREADY);
    assert.equal(byId.get(stopped)!.state, PodSandboxState.SANDBOX_NOTREADY);
    assert.equal((await world.status(ready)).status!.network!.ip, ip);
    assert.equal(await pidAlive(pidReady), true);
    assert.equal(await pidAlive(pidHost), true);
    assert.equal(await ping(ip), true);
    // The restarted daemon's exit watcher still sees pause exits.
    process.kill(pidHost, 'SIGKILL');
    await eventually('NOTREADY after restart', async () => (await world.status(host)).status!.state === PodSandboxState.SANDBOX_NOTREADY);
    for (const id of [ready, host, dies, stopped]) {
      await world.runtime.stopPodSandbox({ podSandboxId: id });
      await world.runtime.removePodSandbox({ podSandboxId: id });
    }
    assert.equal(await pidAlive(pidReady), false);
    assert.deepEqual(await world.leftovers(), []);
  });
});

describe('pod network readiness (real CNI conf dir)', function () {
  this.timeout(30_000);
  const world = new PodWorld();

  suiteHooks({ what: 'pod network readiness tests', skipReason, setup: () => world.start(false), cleanup: () => world.cleanup() });

  it('reports NetworkReady false until a CNI config appears, then runs pods without a restart', async () => {
    const networkReady = async () => (await world.runtime.status({ verbose: false })).status!.conditions.find((c) => c.type === 'NetworkReady')!;
    const before = await networkReady();
    assert.equal(before.status, false);
    assert.equal(before.reason, 'NetworkPluginNotReady');
    await rejectsWith(world.run(world.pod()), 'FAILED_PRECONDITION', /failed to setup network for sandbox "[0-9a-f]{64}": cni config uninitialized/);
    assert.deepEqual(await world.leftovers(), []);
    await world.net.writeConf();
    assert.equal((await networkReady()).status, true);
    const id = await world.run(world.pod());
    assert.ok((await world.status(id)).status!.network!.ip.startsWith(world.net.prefix));
    await world.runtime.removePodSandbox({ podSandboxId: id });
    assert.deepEqual(await world.leftovers(), []);
  });
});
