/**
 * Debian's containerd (1.6) with its CRI plugin, started for a benchmark on its own socket, root and
 * state under a temp dir (nothing touches /var/lib/containerd or /run/containerd). Registries on
 * loopback are reached over plain http through the CRI plugin's mirror settings; pods get the given
 * sandbox (pause) image, CNI conf dir and plugins, and runc state under the temp dir.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile, access } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { criClients, type CriClients } from '../../test/helpers/cri-client.js';
import { descendantsOf } from '../../src/monitor/exec-sync.js';
import { unmountUnder } from './mounts.js';

export const CONTAINERD_BIN = process.env.CONTAINERD_BIN ?? '/usr/bin/containerd';

/** Pids of the containerd shims started for the containerd at `socket` (they name it on their command line). */
async function shimsOf(socket: string): Promise<number[]> {
  const pids: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const argv = (await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '')).split('\0');
    if (argv[0]?.includes('containerd-shim') && argv.includes(socket)) pids.push(Number(name));
  }
  return pids;
}

/**
 * Kills the shims of the containerd at `socket` and everything under them. containerd's shims outlive
 * it by design; one whose pod was removed through the CRI still lingered now and then (a shim left
 * over after a benchmark run), so stop() makes sure none stays behind.
 */
async function killShims(socket: string): Promise<void> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const shims = await shimsOf(socket);
    if (shims.length === 0) return;
    for (const shim of shims) {
      for (const pid of [shim, ...(await descendantsOf(shim))]) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone already
        }
      }
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`containerd shims of ${socket} still run after SIGKILL`);
}

export interface Containerd {
  socket: string;
  dir: string;
  /** The daemon's pid. */
  pid: number;
  clients: CriClients;
  /** Removes every pod through the CRI, stops containerd and its shims, removes the dir. */
  stop(): Promise<void>;
}

export interface ContainerdOptions {
  /** Registry hosts (`host:port`) pulled from over plain http. */
  registries?: string[];
  /** Registry hosts pulled through a mirror instead (`registry.k8s.io` → `http://127.0.0.1:5000`). */
  mirrors?: Record<string, string>;
  /** `host:port/repo:tag` of the pause image (its registry host is reached over plain http too). */
  sandboxImage?: string;
  /** Default: an empty dir of its own (no pod networks). */
  cniConfDir?: string;
  cniBinDir?: string;
  maxConcurrentDownloads?: number;
}

function config(dir: string, o: ContainerdOptions): string {
  const hosts = new Set(o.registries ?? []);
  if (o.sandboxImage) hosts.add(o.sandboxImage.split('/')[0]!);
  const mirrors = [...hosts]
    .map((host) => [host, `http://${host}`])
    .concat(Object.entries(o.mirrors ?? {}))
    .map(([host, endpoint]) => `        [plugins."io.containerd.grpc.v1.cri".registry.mirrors."${host}"]\n          endpoint = ["${endpoint}"]\n`)
    .join('');
  return `version = 2
root = "${dir}/root"
state = "${dir}/state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "${dir}/containerd.sock"
[ttrpc]
  address = "${dir}/containerd.sock.ttrpc"
[debug]
  level = "warn"
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "${dir}/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "${o.sandboxImage ?? '127.0.0.1:1/pause:3.10'}"
    max_concurrent_downloads = ${o.maxConcurrentDownloads ?? 3}
    disable_apparmor = true
    restrict_oom_score_adj = true
    enable_unprivileged_ports = true
    enable_unprivileged_icmp = true
    tolerate_missing_hugetlb_controller = true
    disable_hugetlb_controller = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "/usr/sbin/runc"
          Root = "${dir}/state/runc"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "${o.cniBinDir ?? '/usr/lib/cni'}"
      conf_dir = "${o.cniConfDir ?? `${dir}/cni`}"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".registry]
      [plugins."io.containerd.grpc.v1.cri".registry.mirrors]
${mirrors}`;
}

/** `containerd github.com/containerd/containerd 1.6.x`, for report headings. */
export function containerdVersion(): string {
  return execFileSync(CONTAINERD_BIN, ['--version'], { encoding: 'utf8' }).trim().split(' ').slice(0, 3).join(' ');
}

/** Starts containerd and waits until its CRI answers. */
export async function startContainerd(options: ContainerdOptions = {}): Promise<Containerd> {
  const dir = await mkdtemp(join(tmpdir(), 'stove-bench-containerd-'));
  if (!options.cniConfDir) await mkdir(join(dir, 'cni'));
  await writeFile(join(dir, 'config.toml'), config(dir, options));
  let out = '';
  // The shims and runc are looked up on PATH, whatever the caller's.
  // containerd 2.x from the cluster's cache finds its own containerd-shim-runc-v2 beside it.
  const env = { ...process.env, PATH: `${dirname(CONTAINERD_BIN)}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin` };
  const child: ChildProcess = spawn(CONTAINERD_BIN, ['--config', join(dir, 'config.toml')], { stdio: ['ignore', 'pipe', 'pipe'], env });
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const socket = join(dir, 'containerd.sock');
  let clients: CriClients | undefined;
  const stop = async () => {
    if (clients && child.exitCode === null) {
      const pods = await clients.runtime.listPodSandbox({ filter: undefined }).catch(() => ({ items: [] }));
      for (const pod of pods.items) {
        await clients.runtime.stopPodSandbox({ podSandboxId: pod.id }).catch(() => {});
        await clients.runtime.removePodSandbox({ podSandboxId: pod.id }).catch(() => {});
      }
    }
    clients?.close();
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    }
    await killShims(socket);
    await unmountUnder(dir);
    await rm(dir, { recursive: true, force: true, maxRetries: 5 });
  };
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) {
      await stop();
      throw new Error(`containerd exited:\n${out}`);
    }
    try {
      await access(socket);
      clients ??= criClients(socket);
      await clients.runtime.version({ version: 'v1' });
      break;
    } catch {
      if (Date.now() > deadline) {
        await stop();
        throw new Error(`containerd did not answer:\n${out}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return { socket, dir, pid: child.pid!, clients: clients!, stop };
}
