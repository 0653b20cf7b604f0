/**
 * Debian's containerd with its CRI plugin, started for a benchmark on its own socket, root and state
 * under a temp dir (nothing touches /var/lib/containerd or /run/containerd). Registries on loopback
 * are reached over plain http through the CRI plugin's mirror settings.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile, access } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { criClients, type CriClients } from '../../test/helpers/cri-client.js';
import { unmountUnder } from './mounts.js';

export const CONTAINERD_BIN = process.env.CONTAINERD_BIN ?? '/usr/bin/containerd';

export interface Containerd {
  socket: string;
  dir: string;
  clients: CriClients;
  stop(): Promise<void>;
}

function config(dir: string, registries: string[], maxConcurrentDownloads: number): string {
  const mirrors = registries
    .map((host) => `        [plugins."io.containerd.grpc.v1.cri".registry.mirrors."${host}"]\n          endpoint = ["http://${host}"]\n`)
    .join('');
  return `version = 2
root = "${dir}/root"
state = "${dir}/state"
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
    sandbox_image = "127.0.0.1:1/pause:3.10"
    max_concurrent_downloads = ${maxConcurrentDownloads}
    disable_apparmor = true
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "${dir}/cni"
    [plugins."io.containerd.grpc.v1.cri".registry]
      [plugins."io.containerd.grpc.v1.cri".registry.mirrors]
${mirrors}`;
}

/** Starts containerd and waits until its CRI answers. */
export async function startContainerd(registries: string[], maxConcurrentDownloads = 3): Promise<Containerd> {
  const dir = await mkdtemp(join(tmpdir(), 'stove-bench-containerd-'));
  await mkdir(join(dir, 'cni'));
  await writeFile(join(dir, 'config.toml'), config(dir, registries, maxConcurrentDownloads));
  let out = '';
  const child: ChildProcess = spawn(CONTAINERD_BIN, ['--config', join(dir, 'config.toml')], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const socket = join(dir, 'containerd.sock');
  const stop = async () => {
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
  let clients: CriClients | undefined;
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
