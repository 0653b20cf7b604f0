/**
 * Starts `stove serve` as a child process on its own temporary socket, root and state dirs, for
 * integration tests and benchmarks. `stop()` sends SIGTERM and reports the exit code.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { access, chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { criClients, type CriClients } from './cri-client.js';
import { waitUntilServing } from './child.js';
import { TEST_RUNTIME, writeRuntimeDropIn } from './oci-runtime.js';

export const REPO_ROOT = resolve(import.meta.dirname, '../../..');
export const STOVE_BIN = join(REPO_ROOT, 'bin/stove');

export interface StoveProcess {
  dir: string;
  socket: string;
  root: string;
  state: string;
  configPath: string;
  /** The daemon's drop-in dir (`--config-dir`), empty unless the test writes files there. */
  configDir: string;
  child: ChildProcess;
  /** Everything the daemon wrote to stdout and stderr so far. */
  output(): string;
  clients: CriClients;
  /** SIGTERM, wait for exit; resolves with the exit code (null if killed by a signal). */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** Removes the temp dir (after stop), with whatever pods a stopped daemon left running in it. */
  cleanup(): Promise<void>;
}

export interface StoveOptions {
  /** TOML written to the config file (defaults apply to everything it leaves out). */
  configToml?: string;
  /** Reuse an existing dir (same socket/root/state), e.g. to restart a daemon. */
  dir?: string;
  extraArgs?: string[];
  /** The launcher to run instead of the repository's bin/stove (a copy in another install dir). */
  bin?: string;
  /** Added to the daemon's environment (which is otherwise this process's). */
  env?: Record<string, string>;
}

/** Runs the stove CLI once and returns its exit code and output. */
export function runStoveCli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolvePromise) => {
    const child = spawn(STOVE_BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('exit', (code) => resolvePromise({ code, stdout, stderr }));
  });
}

/**
 * How long a daemon may take to serve: 20 s, and 90 s in the emulated VM guest (test/vm/run.sh sets
 * STOVE_VM), where a first start with cold caches took 34 s with other guests and builds beside it.
 */
const START_TIMEOUT_MS = process.env.STOVE_VM ? 90_000 : 20_000;

/**
 * NRI is on by default: a test daemon that does not configure it gets a socket and plugin dirs in its
 * own dir, so that daemons running side by side never share NRI's host-wide /var/run/nri/nri.sock and a
 * host's /opt/nri/plugins never reaches one.
 */
function withPrivateNri(toml: string, dir: string): string {
  if (/^\s*\[nri[\].]/m.test(toml)) return toml;
  return `${toml}\n[nri]\nsocket_path = ${JSON.stringify(join(dir, 'nri.sock'))}\nplugin_path = ${JSON.stringify(join(dir, 'nri-plugins'))}\nplugin_config_path = ${JSON.stringify(join(dir, 'nri-conf.d'))}\n`;
}

/** Starts a daemon and waits until its socket accepts calls. */
export async function startStove(options: StoveOptions = {}): Promise<StoveProcess> {
  const dir = options.dir ?? (await mkdtemp(join(tmpdir(), 'stove-test-')));
  // Like /run and /var/lib on a node: a pod with its own user namespace runs as an unprivileged host uid
  // that must be able to pass through to its root filesystem under the state dir.
  await chmod(dir, 0o711);
  const socket = join(dir, 'stove.sock');
  const root = join(dir, 'root');
  const state = join(dir, 'state');
  const configPath = join(dir, 'stove.toml');
  await writeFile(configPath, withPrivateNri(options.configToml ?? '', dir));
  // Its own drop-in dir, so a host's /etc/stove/stove.d never reaches a test daemon.
  const configDir = join(dir, 'stove.d');
  await mkdir(configDir, { recursive: true });
  await writeRuntimeDropIn(configDir);
  const child = spawn(
    options.bin ?? STOVE_BIN,
    ['serve', '--config', configPath, '--config-dir', configDir, '--socket', socket, '--root', root, '--state', state, '--log-level', 'debug', ...(options.extraArgs ?? [])],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...options.env } },
  );
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const clients = await (async () => {
    try {
      await waitUntilServing('the stove socket', child, () => out, async () => access(socket).then(() => true, () => false), START_TIMEOUT_MS);
      const started = criClients(socket);
      await waitUntilServing('stove to answer Version', child, () => out, async () => started.runtime.version({ version: 'v1' }).then(() => true, () => false), START_TIMEOUT_MS).catch((err: unknown) => {
        started.close();
        throw err;
      });
      return started;
    } catch (err) {
      // A daemon that never came up leaves neither a process nor, when the dir was made here, a temp dir.
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await exited;
      }
      if (!options.dir) await rm(dir, { recursive: true, force: true });
      throw err;
    }
  })();
  return {
    dir,
    socket,
    root,
    state,
    configPath,
    configDir,
    child,
    clients,
    output: () => out,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      clients.close();
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
    async cleanup() {
      await removeLeftovers(dir, state);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

const run = promisify(execFile);

/**
 * What a daemon stopped mid-call leaves in its dir (a RunPodSandbox still in flight when it got
 * SIGTERM: its conmon and pause outlive it, by design): containers deleted through the runtime, conmons killed,
 * mounts under the dir detached, deepest first. Without this, removing the dir would fail on its mounts
 * and leave the processes, netns and veths behind.
 */
async function removeLeftovers(dir: string, state: string): Promise<void> {
  const runcRoot = join(state, 'runc');
  const listed = await run(TEST_RUNTIME, ['--root', runcRoot, 'list', '-q']).catch(() => ({ stdout: '' }));
  const containers = listed.stdout.split('\n').filter(Boolean);
  for (const id of containers) await run(TEST_RUNTIME, ['--root', runcRoot, 'delete', '-f', id]).catch(() => {});
  const inDir = `${dir}/`;
  let conmons = 0;
  for (const pid of (await readdir('/proc')).filter((name) => /^\d+$/.test(name))) {
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.startsWith('/usr/bin/conmon\0') && cmdline.includes(inDir)) {
      try {
        process.kill(Number(pid), 'SIGKILL');
        conmons++;
      } catch {
        // Gone already.
      }
    }
  }
  const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
  const unescape = (s: string) => s.replace(/\\([0-7]{3})/g, (_m, octal: string) => String.fromCharCode(parseInt(octal, 8)));
  const mounts = mountinfo.split('\n').map((line) => unescape(line.split(' ')[4] ?? '')).filter((m) => m.startsWith(inDir));
  for (const mountPoint of mounts.sort((a, b) => b.length - a.length)) await run('umount', ['-l', mountPoint]).catch(() => {});
  // Said, not hidden: a test that expects a clean dir asserts it before cleanup.
  if (containers.length + conmons + mounts.length > 0) {
    process.stderr.write(`stove-process: left behind in ${dir}: ${containers.length} containers, ${conmons} conmons, ${mounts.length} mounts; removed\n`);
  }
}
