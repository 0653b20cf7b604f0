/**
 * A Stove daemon with its own CNI world (test/integration/network's TestNet: a private bridge, range,
 * conf dir) and its own default cgroup parent, plus the host inspections the sandbox tests share and
 * a safety net that removes every pod, process, mount, cgroup and network piece a test made.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { status, type ServiceError } from '@grpc/grpc-js';
import { execa } from 'execa';
import { PodSandboxConfig, type DeepPartial } from '../../../src/gen/runtime/v1/api.js';
import { detectCgroups, dirIn } from '../../../src/platform/cgroups.js';
import { mountPoints, unmount } from '../../../src/platform/mount.js';
import { REPO_ROOT, startStove, type StoveProcess } from '../../helpers/stove-process.js';
import { TEST_RUNTIME } from '../../helpers/oci-runtime.js';
import { cgroupNameOf, makeParent, parentPath, removeParent, systemdSkipReason, testCgroupDriver, unitsMatching } from '../../helpers/cgroup-driver.js';
import { DEBIAN_CNI_DIR, iptablesLinesMentioning, skipReason as netSkipReason, TestNet } from '../network/host-net.js';

export { iptablesLinesMentioning, TestNet };

/** Why these tests cannot run here, or undefined. */
export function skipReason(): string | undefined {
  const net = netSkipReason();
  if (net) return net;
  for (const bin of [TEST_RUNTIME, '/usr/bin/conmon', '/bin/busybox']) {
    if (!existsSync(bin)) return `${bin} is missing`;
  }
  if (!existsSync(join(REPO_ROOT, 'rootfs/pause/bin/pause'))) return 'rootfs/pause is not built (make rootfs)';
  return testCgroupDriver() === 'systemd' ? systemdSkipReason() : undefined;
}

/** Asserts a call fails with `code` and a message matching `re`; returns the message. */
export async function rejectsWith(p: Promise<unknown>, code: keyof typeof status, re: RegExp): Promise<string> {
  try {
    await p;
  } catch (err) {
    const e = err as ServiceError;
    if (status[e.code] !== code) throw new Error(`expected ${code}, got ${status[e.code]}: ${e.details}`);
    if (!re.test(e.details)) throw new Error(`message ${JSON.stringify(e.details)} does not match ${re}`);
    return e.details;
  }
  throw new Error(`expected ${code}, but the call succeeded`);
}

export { eventually } from '../../helpers/wait.js';
export { pidAlive } from '../../helpers/process.js';

/** The inode of a namespace file (the same for a pin and /proc/<pid>/ns/* of a member). */
export async function nsInode(path: string): Promise<number> {
  return (await stat(path)).ino;
}

export class PodWorld {
  readonly tag = randomBytes(3).toString('hex');
  daemon!: StoveProcess;
  net!: TestNet;
  private uidCounter = 0;
  /** More `[runtime]` lines for this world's daemon (e.g. `log_size_max = 16384`). */
  runtimeToml: string[] = [];
  /** More tables after the world's own (e.g. `[cdi]` and its keys). */
  extraToml: string[] = [];
  /** The daemon's dir (socket, root, state) when the suite prepared one, e.g. with mounts in it. */
  dir?: string;

  /** The cgroup driver of this world's daemon (STOVE_TEST_CGROUP_DRIVER, cgroupfs by default). */
  readonly driver = testCgroupDriver();

  /** The default cgroup parent of this world's pods (config runtime.cgroup_parent): a path or a slice. */
  get cgroupRoot(): string {
    return this.driver === 'systemd' ? `stoveit${this.tag}.slice` : `/stove-it-${this.tag}`;
  }

  /** The cgroup path of the default parent. */
  get cgroupRootPath(): string {
    return parentPath(this.cgroupRoot);
  }

  configToml(): string {
    return [
      '[runtime]',
      `cgroup_driver = "${this.driver}"`,
      `cgroup_parent = "${this.cgroupRoot}"`,
      ...this.runtimeToml,
      '[network]',
      `cni_conf_dir = "${this.net.confDir}"`,
      `cni_bin_dirs = ["${DEBIAN_CNI_DIR}"]`,
      'cni_timeout_seconds = 20',
      ...this.extraToml,
      '',
    ].join('\n');
  }

  async start(writeConf = true): Promise<void> {
    // As a kubelet would, the parent exists before any pod; pods must leave nothing inside it.
    await makeParent(this.cgroupRoot);
    this.net = await TestNet.create();
    if (writeConf) await this.net.writeConf();
    this.daemon = await startStove({ dir: this.dir, configToml: this.configToml() });
  }

  /** SIGKILLs the daemon and starts a new one on the same socket, root and state. */
  async restart(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    await this.daemon.stop(signal);
    this.daemon = await startStove({ dir: this.daemon.dir, configToml: this.configToml() });
  }

  get runtime() {
    return this.daemon.clients.runtime;
  }

  /** A pod config with a fresh uid (name/namespace/uid unique per call unless given). */
  pod(p: DeepPartial<PodSandboxConfig> = {}): PodSandboxConfig {
    const n = ++this.uidCounter;
    return PodSandboxConfig.fromPartial({
      metadata: { name: `pod${n}`, namespace: 'stove-it', uid: `uid-${this.tag}-${n}`, attempt: 0 },
      logDirectory: join(this.daemon.dir, 'logs', `pod${n}`),
      ...p,
    });
  }

  async run(config: PodSandboxConfig, runtimeHandler = ''): Promise<string> {
    return (await this.runtime.runPodSandbox({ config, runtimeHandler })).podSandboxId;
  }

  async status(id: string, verbose = false) {
    return this.runtime.podSandboxStatus({ podSandboxId: id, verbose });
  }

  async info(id: string): Promise<Record<string, unknown> & { pid: number; runtimeSpec: any; netnsPath: string }> {
    return JSON.parse((await this.status(id, true)).info.info!) as never;
  }

  /** Removes every pod through the CRI (what each test's afterEach does). */
  async removeAllPods(): Promise<void> {
    const pods = await this.runtime.listPodSandbox({ filter: undefined });
    for (const p of pods.items) await this.runtime.removePodSandbox({ podSandboxId: p.id });
  }

  /** What a passing test must not leave: pod dirs, pins, mounts, runtime containers, conmons, cgroups, IPs. */
  async leftovers(): Promise<string[]> {
    const out: string[] = [];
    const { root, state, dir } = this.daemon;
    const list = async (d: string) => (await readdir(d).catch(() => [] as string[])).filter((n) => !n.startsWith('.'));
    for (const [what, d] of [
      ['sandbox records', join(root, 'sandboxes')],
      ['sandbox state dirs', join(state, 'sandboxes')],
      ['netns pins', join(state, 'netns')],
      ['exit files', join(state, 'exits')],
      ['attach links', join(state, 'attach')],
    ] as const) {
      const names = await list(d);
      if (names.length) out.push(`${what}: ${names.join(' ')}`);
    }
    const mounts = [...(await mountPoints())].filter((m) => m.startsWith(dir + '/'));
    if (mounts.length) out.push(`mounts: ${mounts.join(' ')}`);
    const runc = await execa(TEST_RUNTIME, ['--root', join(state, 'runc'), 'list', '-q'], { reject: false });
    if (runc.stdout.trim()) out.push(`runc containers: ${runc.stdout.trim().split('\n').join(' ')}`);
    const conmons = await conmonsUnder(dir);
    if (conmons.length) out.push(`conmon processes: ${conmons.join(' ')}`);
    const layout = await detectCgroups();
    for (const h of layout.hierarchies) {
      const d = dirIn(h, this.cgroupRootPath);
      const children = (await readdir(d, { withFileTypes: true }).catch(() => [])).filter((e) => e.isDirectory());
      if (children.length) out.push(`cgroups in ${d}: ${children.map((e) => e.name).join(' ')}`);
    }
    // systemd's side: no scope of a pod or container (tests run one at a time), no slice below the world's.
    const units = (await unitsMatching('stove-', `stoveit${this.tag}-`)).filter((u) => u.startsWith(`stoveit${this.tag}-`) || /^stove-[0-9a-f]{64}\.scope$/.test(u));
    if (units.length) out.push(`systemd units: ${units.join(' ')}`);
    const ips = await this.net.reservedIps();
    if (ips.length) out.push(`reserved IPs: ${ips.join(' ')}`);
    return out;
  }

  /** The cgroup directory name of a pod's pause container or a container, for this world's driver. */
  cgroupNameOf(id: string): string {
    return cgroupNameOf(this.driver, id);
  }

  /** The safety net: pods through the CRI if possible, then everything by hand. */
  async cleanup(): Promise<void> {
    await this.removeAllPods().catch(() => {});
    await this.daemon?.stop().catch(() => {});
    if (this.daemon) {
      for (const pid of await conmonsUnder(this.daemon.dir)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone
        }
      }
      await execa('sh', ['-c', `for c in $(${TEST_RUNTIME} --root ${join(this.daemon.state, 'runc')} list -q); do ${TEST_RUNTIME} --root ${join(this.daemon.state, 'runc')} delete -f $c; done`], { reject: false });
      const mounts = [...(await mountPoints())].filter((m) => m.startsWith(this.daemon.dir + '/')).sort((a, b) => b.length - a.length);
      for (const m of mounts) await unmount(m, true).catch(() => {});
    }
    await removeParent(this.cgroupRoot).catch(() => {});
    await this.net?.cleanup();
    await this.daemon?.cleanup().catch(() => {});
  }
}

/** PIDs of conmon processes whose command line names a path under `dir`. */
export async function conmonsUnder(dir: string): Promise<number[]> {
  const out: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const argv = (await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '')).split('\0');
    if (argv[0]?.endsWith('conmon') && argv.some((a) => a.startsWith(dir + '/'))) out.push(Number(name));
  }
  return out;
}
