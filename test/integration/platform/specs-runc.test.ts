/**
 * The specs Stove builds, run for real by runc on this host: a pause container in a pinned netns (made
 * with `ip netns add`), then an app container joining its namespaces with the RuntimeDefault seccomp
 * profile. Proves runc accepts what buildPauseSpec/buildContainerSpec produce; everything is removed
 * afterwards (containers, runc state, netns, cgroups, temp dirs).
 */
import assert from 'node:assert/strict';
import { installPauseRootfs } from '../../../src/sandbox/pause-rootfs.js';
import { access, chmod, mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile, copyFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { TEST_RUNTIME } from '../../helpers/oci-runtime.js';
import { ContainerConfig, NamespaceMode, PodSandboxConfig, SecurityProfile_ProfileType } from '../../../src/gen/runtime/v1/api.js';
import { CONTAINERD_DEFAULT_CAPABILITIES } from '../../../src/config/schema.js';
import { silentLogger } from '../../../src/common/logger.js';
import { detectCgroups, readCgroupStats, removeCgroup } from '../../../src/platform/cgroups.js';
import { ownEffectiveCapabilities, ownOomScoreAdj } from '../../../src/platform/proc.js';
import { eventually } from '../sandbox/world.js';
import {
  buildContainerSpec,
  buildPauseSpec,
  detectSpecSettings,
  prepareContainerHost,
  preparePauseHost,
  specToJson,
  PAUSE_ROOTFS,
  rroFromRuncFeatures,
  type Spec,
  type SpecSettings,
} from '../../../src/oci/index.js';

const REPO = fileURLToPath(new URL('../../../../', import.meta.url));

const exists = (p: string) => access(p).then(() => true, () => false);

async function sameFile(a: string, b: string): Promise<boolean> {
  const [x, y] = await Promise.all([stat(a), stat(b)]);
  return x.dev === y.dev && x.ino === y.ino;
}

/** A tiny rootfs: static busybox plus passwd/group with a user that has a supplementary group. */
async function busyboxRootfs(rootfs: string): Promise<string> {
  for (const d of ['bin', 'etc', 'proc', 'dev', 'sys', 'tmp']) await mkdir(join(rootfs, d), { recursive: true });
  await copyFile('/bin/busybox', join(rootfs, 'bin/busybox'));
  await chmod(join(rootfs, 'bin/busybox'), 0o755);
  for (const app of ['sh', 'sleep', 'id', 'cat', 'hostname', 'grep']) await symlink('busybox', join(rootfs, 'bin', app));
  await writeFile(join(rootfs, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/tmp:/bin/sh\n');
  await writeFile(join(rootfs, 'etc/group'), 'root:x:0:\napp:x:1000:\nextra:x:50000:app\n');
  return rootfs;
}

describe('specs run by runc', function () {
  this.timeout(60_000);
  const tag = randomBytes(4).toString('hex');
  const netns = `stove-it-${tag}`;
  const cgroupParent = `/stove-it-${tag}`;
  const sandboxId = `pause-${tag}`;
  const containerId = `app-${tag}`;
  const privilegedId = `app-priv-${tag}`;
  const usernsSandboxId = `pause-userns-${tag}`;
  const usernsContainerId = `app-userns-${tag}`;
  let work: string;
  let runcRoot: string;
  let settings: SpecSettings;

  const runc = (...args: string[]) => execa(TEST_RUNTIME, ['--root', runcRoot, ...args], { reject: false, stdin: 'ignore' });

  /** `runc run -d` with stdio ignored (a piped stdio would be held open by the container). */
  async function runDetached(id: string, bundle: string): Promise<number> {
    const log = join(bundle, 'runc.log');
    const r = await execa(TEST_RUNTIME, ['--root', runcRoot, '--log', log, 'run', '-d', '--pid-file', join(bundle, 'pid'), id], {
      cwd: bundle,
      stdio: 'ignore',
      reject: false,
    });
    if (r.exitCode !== 0) assert.fail(`runc run ${id} failed: ${await readFile(log, 'utf8').catch(() => '(no log)')}`);
    const pid = Number((await readFile(join(bundle, 'pid'), 'utf8')).trim());
    // `runc run -d` returns once `runc init` may exec the process, not once it has: until then the pid
    // is still runc init, with its own environment. Wait until it runs the spec's program (the same file
    // as args[0] in its root) with the spec's arguments: the kernel switches the exe link before it sets
    // up the new arguments and environment, so an exe alone can still show an empty environ.
    const args = (JSON.parse(await readFile(join(bundle, 'config.json'), 'utf8')) as Spec).process!.args!;
    const program = args[0]!;
    const execed = async () =>
      (await sameFile(`/proc/${pid}/exe`, `/proc/${pid}/root${program}`)) && (await readFile(`/proc/${pid}/cmdline`, 'utf8')) === `${args.join('\0')}\0`;
    await eventually(`${id} to exec ${args.join(' ')}`, execed, 10_000);
    return pid;
  }

  async function writeBundle(name: string, spec: Spec): Promise<string> {
    const bundle = join(work, name);
    await mkdir(bundle, { recursive: true });
    await writeFile(join(bundle, 'config.json'), specToJson(spec));
    return bundle;
  }

  const nsenter = (pid: number, flags: string[], cmd: string[]) => execa('nsenter', ['-t', String(pid), ...flags, ...cmd]);

  before(async function () {
    if (process.getuid?.() !== 0) {
      console.log('    skipped: running containers needs root');
      this.skip();
    }
    for (const tool of [TEST_RUNTIME, 'ip', 'nsenter']) {
      if ((await execa('sh', ['-c', `command -v ${tool}`], { reject: false })).exitCode !== 0) {
        console.log(`    skipped: ${tool} is not installed`);
        this.skip();
      }
    }
    if (!(await exists(join(PAUSE_ROOTFS, 'bin/pause')))) await execa('make', ['-C', REPO, 'rootfs']);
    work = await mkdtemp(join(tmpdir(), 'stove-runc-'));
    // Processes in a user namespace run as unmapped host ids: they must be able to reach their rootfs.
    await chmod(work, 0o755);
    runcRoot = join(work, 'runc-state');
    await execa('ip', ['netns', 'add', netns]);
    const features = await execa(TEST_RUNTIME, ['features'], { reject: false });
    settings = await detectSpecSettings(
      { defaultCapabilities: CONTAINERD_DEFAULT_CAPABILITIES, cgroupDriver: 'cgroupfs', seccompProfile: '', runtimeSupportsRro: rroFromRuncFeatures(features.stdout) },
      silentLogger,
    );
  });

  after(async () => {
    if (!work) return;
    for (const id of [containerId, privilegedId, sandboxId, usernsContainerId, usernsSandboxId]) {
      await runc('kill', id, 'KILL');
      await runc('delete', '--force', id);
    }
    await execa('ip', ['netns', 'delete', netns], { reject: false });
    await removeCgroup(await detectCgroups(), cgroupParent).catch((e) => console.error('cleanup:', e));
    await rm(work, { recursive: true, force: true });
  });

  /** The pod's pause container, started by whichever test needs it first (tests run in any order, alone too). */
  let pause: Promise<number> | undefined;
  const pausePidOf = () => (pause ??= startPause());
  async function startPause(): Promise<number> {
    const shm = join(work, 'shm');
    await mkdir(shm);
    const config = PodSandboxConfig.fromPartial({
      metadata: { name: 'pod', namespace: 'ns', uid: 'uid', attempt: 0 },
      hostname: 'stove-pod',
      linux: {
        sysctls: { 'net.core.somaxconn': '1234' },
        securityContext: { seccomp: { profileType: SecurityProfile_ProfileType.RuntimeDefault } },
      },
    });
    const { seccompProfiles } = await preparePauseHost(config);
    const spec = buildPauseSpec({
      sandboxId,
      config,
      rootPath: PAUSE_ROOTFS,
      hostname: 'stove-pod',
      netnsPath: `/run/netns/${netns}`,
      shmPath: shm,
      cgroupParent,
      seccompProfiles,
      settings,
    });
    return runDetached(sandboxId, await writeBundle('pause', spec));
  }

  it('runs the pause spec in a pinned netns', async () => {
    const pausePid = await pausePidOf();

    const state = JSON.parse((await runc('state', sandboxId)).stdout) as { status: string; pid: number };
    assert.equal(state.status, 'running');
    assert.equal(state.pid, pausePid);
    assert.equal((await stat(`/proc/${pausePid}/ns/net`)).ino, (await stat(`/run/netns/${netns}`)).ino, 'joined the pinned netns');
    assert.equal((await nsenter(pausePid, ['-u'], ['hostname'])).stdout, 'stove-pod');
    assert.equal((await nsenter(pausePid, ['-n'], ['cat', '/proc/sys/net/ipv4/ip_unprivileged_port_start'])).stdout, '0');
    assert.equal((await nsenter(pausePid, ['-n'], ['cat', '/proc/sys/net/core/somaxconn'])).stdout, '1234');
    const status = await readFile(`/proc/${pausePid}/status`, 'utf8');
    assert.match(status, /^Seccomp:\s+2$/m, 'RuntimeDefault seccomp filter active');
    // With CAP_SYS_RESOURCE the pause gets -998 whatever the daemon's own score (as on containerd and
    // CRI-O); only a daemon that cannot lower scores raises it to its own.
    const own = await ownOomScoreAdj();
    const canLower = (await ownEffectiveCapabilities()).includes('CAP_SYS_RESOURCE');
    assert.equal(Number((await readFile(`/proc/${pausePid}/oom_score_adj`, 'utf8')).trim()), canLower ? -998 : Math.max(-998, own));
    assert.match(await readFile(`/proc/${pausePid}/cgroup`, 'utf8'), new RegExp(`memory:${cgroupParent}/${sandboxId}$`, 'm'));
    const stats = await readCgroupStats(await detectCgroups(), `${cgroupParent}/${sandboxId}`);
    assert.equal(stats.pids?.current, 1n);
  });

  it('runs an app container spec that joins the pause namespaces', async function () {
    if (!(await exists('/bin/busybox'))) {
      console.log('    skipped: /bin/busybox (busybox-static) is missing');
      this.skip();
    }
    const pausePid = await pausePidOf();
    const rootfs = await busyboxRootfs(join(work, 'app-rootfs'));
    const sandboxDir = join(work, 'sandbox-files');
    await mkdir(sandboxDir);
    await writeFile(join(sandboxDir, 'hostname'), 'stove-pod\n');
    await writeFile(join(sandboxDir, 'hosts'), '127.0.0.1 localhost\n');
    await writeFile(join(sandboxDir, 'resolv.conf'), 'nameserver 127.0.0.1\n');
    const data = join(work, 'host-data');

    const podConfig = PodSandboxConfig.fromPartial({ metadata: { name: 'pod', namespace: 'ns', uid: 'uid', attempt: 0 }, hostname: 'stove-pod' });
    const config = ContainerConfig.fromPartial({
      metadata: { name: 'app', attempt: 0 },
      image: { image: 'local/busybox' },
      command: ['/bin/sleep', '300'], // one exec: a shell would exec sleep after the wait saw the shell
      mounts: [{ containerPath: '/data', hostPath: data, readonly: true, recursiveReadOnly: settings.recursiveReadOnlyMounts }],
      devices: [{ containerPath: '/dev/xnull', hostPath: '/dev/null', permissions: 'rw' }],
      linux: {
        resources: { memoryLimitInBytes: 64n * 1024n * 1024n, cpuShares: 256n, oomScoreAdj: 900n },
        securityContext: {
          runAsUser: { value: 1000n },
          supplementalGroups: [1234n],
          readonlyRootfs: true,
          noNewPrivs: true,
          seccomp: { profileType: SecurityProfile_ProfileType.RuntimeDefault },
          namespaceOptions: { pid: NamespaceMode.POD },
        },
      },
    });
    const image = { Env: ['FROM_IMAGE=1'], WorkingDir: '/tmp' };
    const host = await prepareContainerHost({ config, image, rootfsPath: rootfs, settings });
    assert.deepEqual(host.user, { uid: 1000, gid: 1000, additionalGids: [1000, 1234, 50000], username: 'app' });
    assert.ok((await stat(data)).isDirectory(), 'missing host path created');

    const spec = buildContainerSpec({
      id: containerId,
      config,
      image,
      imageName: 'local/busybox',
      rootPath: rootfs,
      sandbox: {
        id: sandboxId,
        config: podConfig,
        hostname: 'stove-pod',
        pausePid,
        netnsPath: `/run/netns/${netns}`,
        files: { hostnamePath: join(sandboxDir, 'hostname'), hostsPath: join(sandboxDir, 'hosts'), resolvConfPath: join(sandboxDir, 'resolv.conf'), shmPath: join(work, 'shm') },
        cgroupParent,
      },
      host,
      settings,
    });
    const pid = await runDetached(containerId, await writeBundle('app', spec));

    for (const ns of ['net', 'uts', 'ipc', 'pid']) {
      assert.equal((await stat(`/proc/${pid}/ns/${ns}`)).ino, (await stat(`/proc/${pausePid}/ns/${ns}`)).ino, `shares the pod ${ns} namespace`);
    }
    assert.notEqual((await stat(`/proc/${pid}/ns/mnt`)).ino, (await stat(`/proc/${pausePid}/ns/mnt`)).ino);
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    assert.match(status, /^Uid:\s+1000\s+1000\s+1000\s+1000$/m);
    assert.match(status, /^Groups:\s+1000 1234 50000\s*$/m);
    assert.match(status, /^Seccomp:\s+2$/m);
    assert.match(status, /^NoNewPrivs:\s+1$/m);
    assert.equal(Number((await readFile(`/proc/${pid}/oom_score_adj`, 'utf8')).trim()), 900);
    const env = (await readFile(`/proc/${pid}/environ`, 'utf8')).split('\0');
    assert.ok(env.includes('HOSTNAME=stove-pod') && env.includes('FROM_IMAGE=1'), env.join(' '));

    const inCtr = (cmd: string) => runc('exec', containerId, '/bin/sh', '-c', cmd);
    assert.equal((await inCtr('cat /etc/hostname')).stdout, 'stove-pod');
    const ro = await inCtr('echo x > /data/f');
    assert.notEqual(ro.exitCode, 0, 'read-only mount');
    const rootRo = await inCtr('echo x > /tmp/f');
    assert.notEqual(rootRo.exitCode, 0, 'read-only root');
    assert.equal((await inCtr('echo ok > /dev/xnull && echo written')).stdout, 'written');
    // Masked paths that exist on this kernel get a mount over them (/proc/kcore may not exist).
    const masked = await inCtr('grep -c -e " /proc/keys " -e " /sys/firmware " /proc/self/mountinfo');
    assert.equal(masked.stdout.trim(), '2', '/proc/keys and /sys/firmware are masked');
    const hostnameChange = await inCtr('hostname other');
    assert.notEqual(hostnameChange.exitCode, 0, 'sethostname denied without CAP_SYS_ADMIN');

    const stats = await readCgroupStats(await detectCgroups(), `${cgroupParent}/${containerId}`);
    assert.equal(stats.memory?.limitBytes, 64n * 1024n * 1024n);
    assert.ok((stats.pids?.current ?? 0n) >= 1n);
  });

  it('runs a privileged container: all capabilities, host devices, writable sysfs', async function () {
    if (!(await exists('/bin/busybox'))) this.skip();
    const pausePid = await pausePidOf();
    const rootfs = await busyboxRootfs(join(work, 'priv-rootfs'));
    const podConfig = PodSandboxConfig.fromPartial({ metadata: { name: 'pod', namespace: 'ns', uid: 'uid' }, linux: { securityContext: { privileged: true } } });
    const config = ContainerConfig.fromPartial({
      metadata: { name: 'priv' },
      command: ['/bin/sleep', '300'],
      linux: { securityContext: { privileged: true, seccomp: { profileType: SecurityProfile_ProfileType.RuntimeDefault } } },
    });
    const host = await prepareContainerHost({ config, image: {}, rootfsPath: rootfs, settings });
    assert.ok(host.hostDevices.some((d) => d.containerPath === '/dev/null'));
    const spec = buildContainerSpec({
      id: privilegedId,
      config,
      image: {},
      imageName: 'local/busybox',
      rootPath: rootfs,
      sandbox: { id: sandboxId, config: podConfig, hostname: 'stove-pod', pausePid, netnsPath: `/run/netns/${netns}`, files: {}, cgroupParent },
      host,
      settings,
    });
    const pid = await runDetached(privilegedId, await writeBundle('app-priv', spec));
    const own = (await readFile('/proc/self/status', 'utf8')).match(/^CapBnd:\s+(\w+)$/m)![1];
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    assert.equal(status.match(/^CapEff:\s+(\w+)$/m)![1], own, 'every capability the daemon holds');
    assert.match(status, /^Seccomp:\s+0$/m, 'privileged ignores seccomp');
    const inCtr = (cmd: string) => runc('exec', privilegedId, '/bin/sh', '-c', cmd);
    assert.match((await inCtr('grep " /sys " /proc/self/mountinfo')).stdout, / \/sys rw,/);
    const hostBlock = host.hostDevices.find((d) => d.type === 'b');
    if (hostBlock) assert.equal((await inCtr(`test -b ${hostBlock.containerPath} && echo yes`)).stdout, 'yes', hostBlock.containerPath);
  });

  it('runs a user-namespace pod: pause with its own netns, app container joining it', async function () {
    if (!(await exists('/bin/busybox'))) this.skip();
    const userns = {
      mode: NamespaceMode.POD,
      uids: [{ hostId: 200000, containerId: 0, length: 65536 }],
      gids: [{ hostId: 200000, containerId: 0, length: 65536 }],
    };
    const podConfig = PodSandboxConfig.fromPartial({
      metadata: { name: 'userns-pod', namespace: 'ns', uid: 'uid2', attempt: 0 },
      hostname: 'userns-pod',
      linux: { securityContext: { namespaceOptions: { usernsOptions: userns } } },
    });
    const shm = join(work, 'shm-userns');
    await mkdir(shm);
    // No pinned netns: runc creates one owned by the pod's user namespace (the caller would pin it).
    // The pod's unprivileged root must reach its root filesystem: use a copy under the 0755 work dir.
    const pauseRoot = await installPauseRootfs(work);
    const pauseSpec = buildPauseSpec({ sandboxId: usernsSandboxId, config: podConfig, rootPath: pauseRoot, hostname: 'userns-pod', shmPath: shm, cgroupParent, settings });
    const pause = await runDetached(usernsSandboxId, await writeBundle('pause-userns', pauseSpec));
    assert.match(await readFile(`/proc/${pause}/uid_map`, 'utf8'), /^\s*0\s+200000\s+65536\s*$/);
    assert.equal((await nsenter(pause, ['-n'], ['cat', '/proc/sys/net/ipv4/ip_unprivileged_port_start'])).stdout, '0');

    const rootfs = await busyboxRootfs(join(work, 'userns-rootfs'));
    const config = ContainerConfig.fromPartial({
      metadata: { name: 'app', attempt: 0 },
      command: ['/bin/sleep', '300'],
      linux: { securityContext: { namespaceOptions: { usernsOptions: userns } } },
    });
    const host = await prepareContainerHost({ config, image: {}, rootfsPath: rootfs, settings });
    const spec = buildContainerSpec({
      id: usernsContainerId,
      config,
      image: {},
      imageName: 'local/busybox',
      rootPath: rootfs,
      sandbox: { id: usernsSandboxId, config: podConfig, hostname: 'userns-pod', pausePid: pause, files: { shmPath: shm }, cgroupParent },
      host,
      settings,
    });
    const pid = await runDetached(usernsContainerId, await writeBundle('app-userns', spec));
    for (const ns of ['user', 'net', 'uts', 'ipc', 'pid']) {
      assert.equal((await stat(`/proc/${pid}/ns/${ns}`)).ino, (await stat(`/proc/${pause}/ns/${ns}`)).ino, `shares the pod ${ns} namespace`);
    }
    assert.match(await readFile(`/proc/${pid}/status`, 'utf8'), /^Uid:\s+200000\s+200000\s+200000\s+200000$/m, 'root inside is 200000 on the host');
    assert.equal((await runc('exec', usernsContainerId, '/bin/id', '-u')).stdout, '0');
  });
});
