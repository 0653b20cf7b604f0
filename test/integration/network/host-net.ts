/**
 * A private CNI world per test: its own conf dir, bridge `stovet<random>`, 10.2xx.y.0/24 range,
 * host-local data dir, netns dir and cache, plus the host inspections and the safety-net cleanup
 * (processes, attachments, pins, iptables rules naming the test's sandboxes, bridge, temp dir).
 */
import { randomBytes, randomInt } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { newId } from '../../../src/common/ids.js';
import { createLogger, silentLogger } from '../../../src/common/logger.js';
import { PodNetworkManager, type PodNetworkRequest } from '../../../src/network/pod-network.js';
import type { SpawnedProcess } from '../../../src/platform/processes.js';

export const DEBIAN_CNI_DIR = '/usr/lib/cni';

/** Why the real-network tests cannot run here, or undefined. */
export function skipReason(): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (network namespaces, bridges, iptables)';
  for (const plugin of ['bridge', 'host-local', 'portmap']) {
    if (!existsSync(join(DEBIAN_CNI_DIR, plugin))) return `CNI plugin ${plugin} missing in ${DEBIAN_CNI_DIR} (apt-get install containernetworking-plugins)`;
  }
  return undefined;
}

/** Every iptables-save line (all tables) that mentions one of `markers`. */
export async function iptablesLinesMentioning(markers: string[]): Promise<string[]> {
  const { stdout } = await execa('iptables-save');
  return stdout.split('\n').filter((l) => markers.some((m) => l.includes(m)));
}

/**
 * Deletes rules naming `markers`, the per-pod CNI chains they are in or jump to (never the shared
 * CNI-HOSTPORT-*), and every other rule that jumps to those chains: a chain still referenced cannot be
 * deleted, and iptables-restore then refuses the whole table's change.
 */
export async function purgeIptables(markers: string[]): Promise<number> {
  let removed = 0;
  for (const table of ['nat', 'filter', 'mangle']) {
    const { stdout } = await execa('iptables-save', ['-t', table]);
    const rules = stdout.split('\n').filter((l) => l.startsWith('-A '));
    const marked = rules.filter((l) => markers.some((m) => l.includes(m)));
    if (marked.length === 0) continue;
    const chains = new Set<string>();
    for (const line of marked) {
      for (const m of line.matchAll(/(?:^-A |-j )(CNI-[A-Za-z0-9-]+)/g)) if (!m[1]!.startsWith('CNI-HOSTPORT-')) chains.add(m[1]!);
    }
    const jumps = rules.filter((l) => !marked.includes(l) && [...chains].some((c) => l.endsWith(`-j ${c}`)));
    marked.push(...jumps);
    const script = [`*${table}`, ...marked.map((l) => l.replace(/^-A /, '-D ')), ...[...chains].flatMap((c) => [`-F ${c}`, `-X ${c}`]), 'COMMIT', ''].join('\n');
    await execa('iptables-restore', ['--noflush'], { input: script, reject: false });
    removed += marked.length;
  }
  return removed;
}

/** The portmap plugin's shared nat chains: made by the first pod with a host port, never removed by it. */
const HOSTPORT_CHAINS = ['CNI-HOSTPORT-DNAT', 'CNI-HOSTPORT-SETMARK', 'CNI-HOSTPORT-MASQ'];

async function hostportChainsExist(): Promise<boolean> {
  return (await execa('iptables', ['-w', '-t', 'nat', '-S', HOSTPORT_CHAINS[0]!], { reject: false })).exitCode === 0;
}

/**
 * Removes portmap's shared chains and the rules jumping to them once no pod's DNAT rule is left in them
 * (another runtime's host ports keep them). Called only by a test that found them absent.
 */
async function removeUnusedHostportChains(): Promise<void> {
  const { stdout } = await execa('iptables-save', ['-t', 'nat']);
  const rules = stdout.split('\n').filter((l) => l.startsWith('-A '));
  if (rules.some((l) => l.startsWith(`-A ${HOSTPORT_CHAINS[0]} `))) return;
  const jumps = rules.filter((l) => HOSTPORT_CHAINS.some((c) => l.includes(`-j ${c}`) && !l.startsWith(`-A ${c} `)));
  const present = HOSTPORT_CHAINS.filter((c) => stdout.includes(`:${c} `));
  const script = ['*nat', ...jumps.map((l) => l.replace(/^-A /, '-D ')), ...present.flatMap((c) => [`-F ${c}`, `-X ${c}`]), 'COMMIT', ''];
  await execa('iptables-restore', ['-w', '--noflush'], { input: script.join('\n'), reject: false });
}

export async function linkExists(name: string): Promise<boolean> {
  return (await execa('ip', ['link', 'show', 'dev', name], { reject: false })).exitCode === 0;
}

/** Interfaces enslaved to a bridge (the host ends of pod veths). */
export async function bridgePorts(bridge: string): Promise<string[]> {
  const r = await execa('ip', ['-o', 'link', 'show', 'master', bridge], { reject: false });
  if (r.exitCode !== 0) return [];
  return r.stdout.split('\n').filter(Boolean).map((l) => l.split(':')[1]!.trim().split('@')[0]!);
}

/** A 10.2xx.y.0/24 that no host route covers yet. */
async function freeSubnet(): Promise<string> {
  const { stdout } = await execa('ip', ['-4', 'route', 'show']);
  for (let i = 0; i < 50; i++) {
    const prefix = `10.${200 + randomInt(56)}.${randomInt(256)}`;
    if (!stdout.includes(`${prefix}.`)) return prefix;
  }
  throw new Error('no free 10.2xx.y.0/24 for the test');
}

export interface Attached {
  sandboxId: string;
  netnsPath: string;
  ip: string;
}

export class TestNet {
  readonly manager: PodNetworkManager;
  readonly processes: SpawnedProcess[] = [];
  readonly sandboxes = new Map<string, string>();

  private constructor(
    readonly dir: string,
    readonly name: string,
    readonly bridge: string,
    /** First three octets, e.g. "10.231.7". */
    readonly prefix: string,
    /** Whether portmap's shared chains were there before this test network: if not, cleanup removes them. */
    private readonly hostportChainsExisted: boolean,
  ) {
    this.manager = new PodNetworkManager({
      cniConfDir: this.confDir,
      cniBinDirs: [DEBIAN_CNI_DIR],
      cniTimeoutSeconds: 30,
      netnsDir: join(dir, 'netns'),
      cacheDir: join(dir, 'cache'),
      log: process.env.STOVE_TEST_DEBUG ? createLogger('debug') : silentLogger,
    });
  }

  static async create(): Promise<TestNet> {
    const dir = await mkdtemp(join(tmpdir(), 'stove-net-'));
    const tag = randomBytes(3).toString('hex');
    const net = new TestNet(dir, `stovet-${tag}`, `stovet${tag}`, await freeSubnet(), await hostportChainsExist());
    await mkdir(net.confDir);
    await mkdir(net.dataDir);
    return net;
  }

  get confDir(): string {
    return join(this.dir, 'net.d');
  }
  get dataDir(): string {
    return join(this.dir, 'ipam');
  }
  get subnet(): string {
    return `${this.prefix}.0/24`;
  }
  get gateway(): string {
    return `${this.prefix}.1`;
  }

  /** The bridge plugin's config for this test's bridge and range. */
  bridgePlugin(extra: Record<string, unknown> = {}): Record<string, unknown> {
    return {
      type: 'bridge',
      bridge: this.bridge,
      isGateway: true,
      ipMasq: true,
      ipam: { type: 'host-local', dataDir: this.dataDir, ranges: [[{ subnet: this.subnet }]], routes: [{ dst: '0.0.0.0/0' }] },
      ...extra,
    };
  }

  static portmapPlugin(extra: Record<string, unknown> = {}): Record<string, unknown> {
    return { type: 'portmap', capabilities: { portMappings: true }, snat: true, ...extra };
  }

  /** Writes a conflist (bridge + portmap unless told otherwise) into the test's conf dir. */
  async writeConf(plugins?: Record<string, unknown>[], file = '10-stove-test.conflist'): Promise<void> {
    const list = { cniVersion: '1.0.0', name: this.name, plugins: plugins ?? [this.bridgePlugin(), TestNet.portmapPlugin()] };
    await writeFile(join(this.confDir, file), JSON.stringify(list, null, 2));
  }

  request(sandboxId: string, netnsPath: string, extra: Partial<PodNetworkRequest> = {}): PodNetworkRequest {
    return { sandboxId, netnsPath, podName: `pod-${sandboxId.slice(0, 6)}`, podNamespace: 'stove-test', podUid: `uid-${sandboxId.slice(0, 8)}`, ...extra };
  }

  /** What RunPodSandbox will do: pin a netns, run CNI ADD, and undo the pin if ADD fails. */
  async attach(extra: Partial<PodNetworkRequest> = {}): Promise<Attached> {
    const sandboxId = newId();
    const netnsPath = await this.manager.createNetns(sandboxId);
    this.sandboxes.set(sandboxId, netnsPath);
    try {
      const result = await this.manager.setup(this.request(sandboxId, netnsPath, extra));
      return { sandboxId, netnsPath, ip: result.primaryIp };
    } catch (err) {
      await this.manager.removeNetns(netnsPath);
      throw err;
    }
  }

  /** What StopPodSandbox will do: CNI DEL, then unpin. */
  async detach(pod: { sandboxId: string; netnsPath: string }): Promise<void> {
    await this.manager.teardown({ sandboxId: pod.sandboxId, netnsPath: pod.netnsPath });
    await this.manager.removeNetns(pod.netnsPath);
  }

  /** IPs host-local still holds for this network. */
  async reservedIps(): Promise<string[]> {
    const names = await readdir(join(this.dataDir, this.name)).catch(() => [] as string[]);
    return names.filter((n) => n !== 'lock' && !n.startsWith('last_reserved_ip'));
  }

  /** Everything the test made, even after a failure; returns what the safety net had to remove. */
  async cleanup(): Promise<string[]> {
    const leftovers: string[] = [];
    for (const p of this.processes) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    for (const [sandboxId, netnsPath] of this.sandboxes) {
      await this.manager.teardown({ sandboxId, netnsPath }).catch((e: Error) => leftovers.push(`teardown: ${e.message}`));
      await this.manager.removeNetns(netnsPath).catch((e: Error) => leftovers.push(`netns: ${e.message}`));
    }
    // The network's name (random) is in the comment of every rule the bridge plugin writes for it, its
    // subnet only in some: a pod the test's runtime left behind is found by either.
    const purged = await purgeIptables([...this.sandboxes.keys(), this.subnet, this.name]);
    if (purged) leftovers.push(`${purged} iptables rules`);
    if (!this.hostportChainsExisted) await removeUnusedHostportChains();
    if (await linkExists(this.bridge)) await execa('ip', ['link', 'del', this.bridge], { reject: false });
    await rm(this.dir, { recursive: true, force: true });
    return leftovers;
  }
}
