/**
 * Running host programs inside a pod's network namespace (`nsenter --net=<pin>`; only the network
 * namespace changes, so host binaries and files stay visible) and reading its interface counters.
 * Port-forward uses the spawn form, e.g. `socat - TCP:127.0.0.1:<port>` with piped stdio.
 */
import { readFile } from 'node:fs/promises';
import { internal, notFound } from '../common/errors.js';
import { runCommand, startProcess, type SpawnedProcess, type StartProcessOptions } from '../platform/processes.js';

/** The argv that runs `argv` inside the namespace pinned at `netnsPath`. */
export function netnsCommand(netnsPath: string, argv: string[]): [string, ...string[]] {
  if (argv.length === 0) throw new Error('netnsCommand needs a program');
  return ['nsenter', `--net=${netnsPath}`, '--', ...argv];
}

/** Starts `argv` in the namespace; the caller owns the process (stdio as in `options`). */
export function spawnInNetns(netnsPath: string, argv: string[], options: StartProcessOptions): SpawnedProcess {
  const [file, ...args] = netnsCommand(netnsPath, argv);
  return startProcess(file, args, options);
}

export interface NetnsExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** Runs `argv` in the namespace to completion. A timeout or a signal is an error; a non-zero exit is not. */
export async function execInNetns(
  netnsPath: string,
  argv: string[],
  options: { input?: string; timeoutMs?: number } = {},
): Promise<NetnsExecResult> {
  const [file, ...args] = netnsCommand(netnsPath, argv);
  const r = await runCommand(file, { args, input: options.input, timeoutMs: options.timeoutMs });
  if (r.timedOut) throw internal(`${argv[0]} in ${netnsPath} timed out after ${options.timeoutMs}ms`);
  if (r.exitCode === null) throw internal(`cannot run ${argv[0]} in ${netnsPath}: ${r.spawnError?.message ?? `killed by ${r.signal}`}`);
  return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr };
}

/** Counters of one interface, as CRI's NetworkUsage wants them. */
export interface InterfaceStats {
  name: string;
  rxBytes: bigint;
  rxErrors: bigint;
  txBytes: bigint;
  txErrors: bigint;
  rxPackets: bigint;
  rxDropped: bigint;
  txPackets: bigint;
  txDropped: bigint;
}

/**
 * Parses /proc/net/dev: two header lines, then `name: rx_bytes rx_packets rx_errs rx_drop rx_fifo
 * rx_frame rx_compressed rx_multicast tx_bytes tx_packets tx_errs …`.
 */
export function parseNetDev(text: string): Map<string, InterfaceStats> {
  const stats = new Map<string, InterfaceStats>();
  for (const line of text.split('\n')) {
    const colon = line.indexOf(':');
    if (colon < 0) continue;
    const name = line.slice(0, colon).trim();
    const fields = line.slice(colon + 1).trim().split(/\s+/);
    if (!name || fields.length < 16 || !fields.every((f) => /^\d+$/.test(f))) continue;
    const n = (i: number) => BigInt(fields[i]!);
    stats.set(name, {
      name,
      rxBytes: n(0),
      rxPackets: n(1),
      rxErrors: n(2),
      rxDropped: n(3),
      txBytes: n(8),
      txPackets: n(9),
      txErrors: n(10),
      txDropped: n(11),
    });
  }
  return stats;
}

function pick(stats: Map<string, InterfaceStats>, ifName: string, where: string): InterfaceStats {
  const s = stats.get(ifName);
  if (!s) throw notFound(`interface ${ifName} not found in ${where}`);
  return s;
}

/** Counters of `ifName` inside the namespace pinned at `netnsPath` (runs `cat` there). */
export async function netnsInterfaceStats(netnsPath: string, ifName = 'eth0'): Promise<InterfaceStats> {
  const r = await execInNetns(netnsPath, ['cat', '/proc/net/dev'], { timeoutMs: 10_000 });
  if (r.exitCode !== 0) throw internal(`reading /proc/net/dev in ${netnsPath} failed: ${r.stderr.trim()}`);
  return pick(parseNetDev(r.stdout), ifName, netnsPath);
}

/** Counters of `ifName` in the network namespace of process `pid` (no process spawned). */
export async function processInterfaceStats(pid: number, ifName = 'eth0'): Promise<InterfaceStats> {
  return pick(await processNetDev(pid), ifName, `the network namespace of process ${pid}`);
}

/** Counters of every interface in the network namespace of process `pid` (read through its /proc). */
export async function processNetDev(pid: number): Promise<Map<string, InterfaceStats>> {
  const text = await readFile(`/proc/${pid}/net/dev`, 'utf8').catch((err: NodeJS.ErrnoException) => {
    throw err.code === 'ENOENT' ? notFound(`process ${pid} not found`) : err;
  });
  return parseNetDev(text);
}
