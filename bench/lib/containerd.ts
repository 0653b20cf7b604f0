/**
 * Debian's containerd (1.6) with its CRI plugin, started for a benchmark on its own socket, root and
 * state under a temp dir (nothing touches /var/lib/containerd or /run/containerd), with the config the
 * cluster and critest use too (test/e2e/containerd/config.toml). Registries on loopback are reached
 * over plain http through certs.d hosts files; pods get the given
 * sandbox (pause) image, CNI conf dir and plugins, and runc state under the temp dir.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile, access } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { criClients, type CriClients } from '../../test/helpers/cri-client.js';
import { REPO_ROOT } from '../../test/helpers/stove-process.js';
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

/** test/e2e/containerd/config.toml, the one containerd config of the cluster, critest and the benchmarks. */
const CONFIG_TEMPLATE = join(REPO_ROOT, 'test/e2e/containerd/config.toml');

/** The config with its @NAME@ fields filled in; a field left without a value is an error. */
export async function containerdConfig(fields: Record<string, string>): Promise<string> {
  let text = (await readFile(CONFIG_TEMPLATE, 'utf8'))
    .split('\n')
    .filter((line) => !line.startsWith('#'))
    .join('\n');
  for (const [name, value] of Object.entries(fields)) text = text.replaceAll(`@${name}@`, value);
  const left = /@[A-Z_]+@/.exec(text);
  if (left) throw new Error(`${CONFIG_TEMPLATE}: no value for ${left[0]}`);
  return text;
}

/** certs.d/<host>/hosts.toml: plain http for the registries on loopback, and the mirrors. */
async function writeHosts(certsDir: string, o: ContainerdOptions): Promise<void> {
  const hosts = new Set(o.registries ?? []);
  if (o.sandboxImage) hosts.add(o.sandboxImage.split('/')[0]!);
  const entries: [string, string, string][] = [...hosts].map((host) => [host, `http://${host}`, `http://${host}`]);
  for (const [host, endpoint] of Object.entries(o.mirrors ?? {})) entries.push([host, `https://${host}`, endpoint]);
  for (const [host, server, endpoint] of entries) {
    await mkdir(join(certsDir, host), { recursive: true });
    await writeFile(join(certsDir, host, 'hosts.toml'), `server = "${server}"\n[host."${endpoint}"]\n  capabilities = ["pull", "resolve"]\n`);
  }
}

/** `containerd github.com/containerd/containerd 1.6.x`, for report headings. */
export function containerdVersion(): string {
  return execFileSync(CONTAINERD_BIN, ['--version'], { encoding: 'utf8' }).trim().split(' ').slice(0, 3).join(' ');
}

/** Starts containerd and waits until its CRI answers. */
export async function startContainerd(options: ContainerdOptions = {}): Promise<Containerd> {
  const dir = await mkdtemp(join(tmpdir(), 'stove-bench-containerd-'));
  if (!options.cniConfDir) await mkdir(join(dir, 'cni'));
  await writeHosts(join(dir, 'certs.d'), options);
  const config = await containerdConfig({
    ROOT: join(dir, 'root'),
    STATE: join(dir, 'state'),
    SOCKET: join(dir, 'containerd.sock'),
    SANDBOX_IMAGE: options.sandboxImage ?? '127.0.0.1:1/pause:3.10',
    MAX_CONCURRENT_DOWNLOADS: String(options.maxConcurrentDownloads ?? 3),
    RUNC: '/usr/sbin/runc',
    CNI_BIN_DIR: options.cniBinDir ?? '/usr/lib/cni',
    CNI_CONF_DIR: options.cniConfDir ?? join(dir, 'cni'),
    CERTS_DIR: join(dir, 'certs.d'),
  });
  await writeFile(join(dir, 'config.toml'), config);
  let out = '';
  // The shims and runc are looked up on PATH, whatever the caller's.
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
