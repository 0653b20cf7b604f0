/**
 * Debian's containerd 1.6 with its CRI plugin, set up for pod benchmarks: a given sandbox (pause)
 * image from a loopback registry, a given CNI conf dir and the Debian CNI plugins, runc state under
 * the temp dir. Everything lives in a temp dir that `stop()` removes (after removing every pod).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { access, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { criClients, type CriClients } from '../../test/helpers/cri-client.js';
import { CONTAINERD_BIN } from './containerd.js';
import { unmountUnder } from './mounts.js';

export interface PodContainerd {
  socket: string;
  dir: string;
  clients: CriClients;
  /** Removes every pod through the CRI, stops containerd and its shims, removes the dir. */
  stop(): Promise<void>;
}

export interface PodContainerdOptions {
  /** `host:port/repo:tag` of the pause image (the registry host is reached over plain http). */
  sandboxImage: string;
  cniConfDir: string;
  cniBinDir: string;
}

function config(dir: string, o: PodContainerdOptions): string {
  const host = o.sandboxImage.split('/')[0]!;
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
    sandbox_image = "${o.sandboxImage}"
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
      bin_dir = "${o.cniBinDir}"
      conf_dir = "${o.cniConfDir}"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".registry]
      [plugins."io.containerd.grpc.v1.cri".registry.mirrors]
        [plugins."io.containerd.grpc.v1.cri".registry.mirrors."${host}"]
          endpoint = ["http://${host}"]
`;
}

/** Starts containerd and waits until its CRI answers. */
export async function startPodContainerd(options: PodContainerdOptions): Promise<PodContainerd> {
  const dir = await mkdtemp(join(tmpdir(), 'stove-bench-containerd-pods-'));
  await writeFile(join(dir, 'config.toml'), config(dir, options));
  let out = '';
  const env = { ...process.env, PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' };
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
  return { socket, dir, clients: clients!, stop };
}
