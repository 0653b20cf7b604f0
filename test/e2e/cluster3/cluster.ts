/**
 * What the three-node scenarios need: kubectl with the cluster's admin kubeconfig, commands on a node
 * (multi/node.sh: in the node's network and mount namespaces, as an operator on that machine), crictl,
 * the runtime the nodes run (Stove, or containerd with CLUSTER_RUNTIME=containerd), and waiting with a
 * bound.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { waitFor as waitUntil } from '../../helpers/wait.js';

export const SCRIPTS = resolve(import.meta.dirname, '../../../../test/e2e/cluster');
export const CLUSTER_DIR = process.env.CLUSTER_DIR ?? '/var/lib/stove-cluster3';
export const NODES = ['cp-1', 'worker-1', 'worker-2'] as const;
export type NodeName = (typeof NODES)[number];
export type Runtime = 'stove' | 'containerd';

/** The runtime the suite asks up.sh for (or, with CLUSTER_REUSE=1, the one the cluster up runs); useCluster reads the one it got. */
export const WANTED_RUNTIME: Runtime = asRuntime(
  process.env.CLUSTER_RUNTIME || (process.env.CLUSTER_REUSE === '1' && existsSync(join(CLUSTER_DIR, 'runtime')) ? readFileSync(join(CLUSTER_DIR, 'runtime'), 'utf8').trim() : 'stove'),
);

function asRuntime(name: string): Runtime {
  if (name !== 'stove' && name !== 'containerd') throw new Error(`CLUSTER_RUNTIME is stove or containerd, not ${name}`);
  return name;
}

interface Cluster {
  kubectl: string;
  kubeconfig: string;
  crictl: string;
  endpoints: Record<string, string>;
  images: Record<string, string>;
  runtime: Runtime;
}
let cluster: Cluster | undefined;

export function useCluster(vars: { kubectl: string; kubeconfig: string; crictl: string; endpoints: Record<string, string> }): void {
  const images = Object.fromEntries(
    readFileSync(join(CLUSTER_DIR, 'images.env'), 'utf8')
      .split('\n')
      .filter((l) => l.includes('='))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
  const runtime = asRuntime(readFileSync(join(CLUSTER_DIR, 'runtime'), 'utf8').trim());
  if (runtime !== WANTED_RUNTIME) throw new Error(`the cluster up runs ${runtime}, not ${WANTED_RUNTIME} (CLUSTER_RUNTIME)`);
  cluster = { ...vars, images, runtime };
}

function current(): Cluster {
  if (!cluster) throw new Error('the three-node cluster is not up (setup.ts did not run)');
  return cluster;
}

export function busyboxImage(): string {
  return current().images.BUSYBOX_IMAGE!;
}

/** kubectl with the admin kubeconfig; `all`: stdout and stderr interleaved (drain reports refusals on stderr). */
export async function kubectl(args: string[], options: { input?: string; timeoutMs?: number; reject?: boolean; all?: boolean } = {}): Promise<string> {
  const { kubectl: bin, kubeconfig } = current();
  const r = await execa(bin, ['--kubeconfig', kubeconfig, ...args], { input: options.input, timeout: options.timeoutMs ?? 90_000, reject: false, all: true });
  if (r.exitCode !== 0 && options.reject !== false) throw new Error(`kubectl ${args.join(' ')}: exit ${r.exitCode}: ${r.stderr || r.stdout}`);
  if (options.all) return r.all;
  return r.exitCode === 0 ? r.stdout : `${r.stdout}\n${r.stderr}`;
}

export async function apply(manifest: string): Promise<void> {
  await kubectl(['apply', '-f', '-'], { input: manifest });
}

export async function getJson<T>(args: string[]): Promise<T> {
  return JSON.parse(await kubectl(['get', ...args, '-o', 'json'])) as T;
}

/** CMD in NODE's namespaces (multi/node.sh exec); rejects on a non-zero exit. */
export async function onNode(node: NodeName, cmd: string[], timeoutMs = 60_000): Promise<string> {
  const r = await execa(join(SCRIPTS, 'multi/node.sh'), ['exec', node, ...cmd], { timeout: timeoutMs, reject: false });
  if (r.exitCode !== 0) throw new Error(`on ${node}: ${cmd.join(' ')}: exit ${r.exitCode}: ${r.stderr || r.stdout}`);
  return r.stdout;
}

/** crictl on NODE against its runtime's socket, as an operator runs it there. */
export async function crictl(node: NodeName, args: string[], timeoutMs = 60_000): Promise<string> {
  const { crictl: bin, endpoints } = current();
  return onNode(node, [bin, '--runtime-endpoint', endpoints[node]!, '--timeout', '30s', ...args], timeoutMs);
}

export async function nodeScript(cmd: 'kubelet-stop' | 'kubelet-start', node: NodeName): Promise<string> {
  const r = await execa(join(SCRIPTS, 'multi/node.sh'), [cmd, node], { timeout: 60_000, reject: false });
  if (r.exitCode !== 0) throw new Error(`node.sh ${cmd} ${node}: ${r.stderr}`);
  return r.stdout.trim();
}

/** waitFor at the cluster's pace (a check is a kubectl call: every 2 s); `false` counts as not yet. */
export function waitFor<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined | false>): Promise<T> {
  return waitUntil(
    what,
    async () => {
      const v = await check();
      return v === false ? undefined : v;
    },
    { timeoutMs, intervalMs: 2000 },
  );
}

export interface PodJson {
  metadata: { name: string; uid: string; labels?: Record<string, string> };
  spec: { nodeName?: string };
  status: { phase?: string; podIP?: string; conditions?: { type: string; status: string }[]; containerStatuses?: { name: string; restartCount: number; containerID?: string }[] };
}

export async function pods(namespace: string, selector: string): Promise<PodJson[]> {
  return (await getJson<{ items: PodJson[] }>(['-n', namespace, 'pods', '-l', selector])).items;
}

export function isReady(p: PodJson): boolean {
  return p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

export interface NodeJson {
  metadata: { name: string };
  spec: { podCIDR?: string; taints?: { key: string; effect: string }[]; unschedulable?: boolean };
  status: { conditions: { type: string; status: string; reason?: string; message?: string }[]; nodeInfo: { containerRuntimeVersion: string }; allocatable: Record<string, string> };
}

export async function node(name: NodeName): Promise<NodeJson> {
  return getJson<NodeJson>(['node', name]);
}

export function condition(n: NodeJson, type: string): { status: string; reason?: string; message?: string } | undefined {
  return n.status.conditions.find((c) => c.type === type);
}
