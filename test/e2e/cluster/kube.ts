/**
 * What the cluster suite needs to drive the single-node cluster: kubectl (the real client, as an operator
 * uses it), waiting on conditions with a bound, and the cluster's facts (up.sh's environment file).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { execa, type Options, type ResultPromise } from 'execa';
import { waitFor as waitUntil } from '../../helpers/wait.js';
import { criClients } from '../../helpers/cri-client.js';
import { PullImageRequest } from '../../../src/gen/runtime/v1/api.js';

export const CLUSTER_SCRIPTS = resolve(import.meta.dirname, '../../../../test/e2e/cluster');
export const CLUSTER_DIR = process.env.CLUSTER_DIR ?? '/var/lib/stove-cluster';
export const NODE_NAME = 'stove-node';
export const NODE_IP = '10.250.0.1';
export const POD_CIDR_PREFIX = '10.244.0.';
export const CNI_CONF = join(CLUSTER_DIR, 'cni/net.d/10-e2e-bridge.conflist');

export type NodeRuntime = 'stove' | 'containerd';

/** The node's runtime: what up.sh recorded in `$CLUSTER_DIR/runtime` (CLUSTER_RUNTIME), Stove by default. */
export function nodeRuntime(): NodeRuntime {
  const file = join(CLUSTER_DIR, 'runtime');
  const recorded = existsSync(file) ? readFileSync(file, 'utf8').trim() : process.env.CLUSTER_RUNTIME || 'stove';
  if (recorded !== 'stove' && recorded !== 'containerd') throw new Error(`${file}: runtime "${recorded}" is neither stove nor containerd`);
  return recorded;
}

/** The node runtime's CRI socket (the kubelet's containerRuntimeEndpoint). */
export function criSocket(): string {
  return nodeRuntime() === 'containerd' ? join(CLUSTER_DIR, 'containerd/containerd.sock') : join(CLUSTER_DIR, 'stove/stove.sock');
}

interface Cluster {
  kubectl: string;
  kubeconfig: string;
  images: Record<string, string>;
}

let cluster: Cluster | undefined;

/** Set by the suite's setup once up.sh printed where kubectl and the kubeconfig are. */
export function useCluster(kubectl: string, kubeconfig: string): void {
  const images = Object.fromEntries(
    readFileSync(join(CLUSTER_DIR, 'images.env'), 'utf8')
      .split('\n')
      .filter((l) => l.includes('='))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
  cluster = { kubectl, kubeconfig, images };
}

function current(): Cluster {
  if (!cluster) throw new Error('the cluster is not up (setup.ts did not run)');
  return cluster;
}

export type ImageName = 'BUSYBOX_IMAGE' | 'BUSYBOX2_IMAGE' | 'COREDNS_IMAGE' | 'DATA_IMAGE' | 'BUSYBOX_IMAGE_ID' | 'PINNED_IMAGE' | 'UNUSED_IMAGE';

export function image(name: ImageName): string {
  const value = current().images[name];
  if (!value) throw new Error(`images.env has no ${name}`);
  return value;
}

/** kubectl with the admin kubeconfig; rejects with kubectl's stderr on a non-zero exit. */
export async function kubectl(args: string[], options: { input?: string; timeoutMs?: number } = {}): Promise<string> {
  const { kubectl: bin, kubeconfig } = current();
  const result = await execa(bin, ['--kubeconfig', kubeconfig, ...args], {
    input: options.input,
    timeout: options.timeoutMs ?? 60_000,
    reject: false,
  });
  if (result.exitCode !== 0) throw new Error(`kubectl ${args.join(' ')}: exit ${result.exitCode}: ${result.stderr || result.stdout}`);
  return result.stdout;
}

/** A long-running kubectl (logs -f, port-forward, attach) whose output the test reads as it comes. */
export function kubectlProcess(args: string[], options: Options = {}): ResultPromise {
  const { kubectl: bin, kubeconfig } = current();
  return execa(bin, ['--kubeconfig', kubeconfig, ...args], { reject: false, ...options });
}

/** The kubectl command line for `args`, quoted for a shell (for a program that runs it under a terminal). */
export function kubectlCommandLine(args: string[]): string {
  const { kubectl: bin, kubeconfig } = current();
  return [bin, '--kubeconfig', kubeconfig, ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
}

export async function apply(manifest: string): Promise<void> {
  await kubectl(['apply', '-f', '-'], { input: manifest });
}

export async function getJson<T = Record<string, unknown>>(args: string[]): Promise<T> {
  return JSON.parse(await kubectl(['get', ...args, '-o', 'json'])) as T;
}

/**
 * test/helpers/wait.ts's waitFor at the cluster's pace (a check is a kubectl call: once a second), with
 * the timeout first; `false` counts as not yet.
 */
export function waitFor<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined | false>): Promise<T> {
  return waitUntil(what, async () => {
    const value = await check();
    return value === false ? undefined : value;
  }, { timeoutMs, intervalMs: 1000 });
}

export interface PodJson {
  metadata: { name: string; uid: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec: { nodeName?: string; containers: { name: string }[] };
  status: {
    phase?: string;
    podIP?: string;
    conditions?: { type: string; status: string }[];
    containerStatuses?: ContainerStatusJson[];
    initContainerStatuses?: ContainerStatusJson[];
  };
}

export interface ContainerStatusJson {
  name: string;
  ready: boolean;
  started?: boolean;
  restartCount: number;
  containerID?: string;
  imageID?: string;
  image?: string;
  state: { running?: { startedAt: string }; waiting?: { reason?: string; message?: string }; terminated?: { exitCode: number; reason?: string; startedAt?: string; finishedAt?: string } };
  lastState?: ContainerStatusJson['state'];
}

export async function pod(namespace: string, name: string): Promise<PodJson> {
  return getJson<PodJson>(['-n', namespace, 'pod', name]);
}

export async function podsWithLabel(namespace: string, selector: string): Promise<PodJson[]> {
  return (await getJson<{ items: PodJson[] }>(['-n', namespace, 'pods', '-l', selector])).items;
}

export function isReady(p: PodJson): boolean {
  return p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

export async function waitPodReady(namespace: string, name: string, timeoutMs = 120_000): Promise<PodJson> {
  return waitFor(`pod ${namespace}/${name} Ready`, timeoutMs, async () => {
    const p = await pod(namespace, name);
    return isReady(p) ? p : undefined;
  });
}

/**
 * A namespace of the suite's own: created before its first test (once its default service account
 * exists, which pods need), deleted after its last without waiting (down.sh removes the rest).
 */
export function suiteNamespace(name: string): { readonly name: string } {
  let created = false;
  before(async () => {
    await kubectl(['create', 'namespace', name]);
    created = true;
    await waitFor(`the default service account in ${name}`, 30_000, async () => (await kubectl(['-n', name, 'get', 'serviceaccount', 'default'])).length > 0);
  });
  after(async () => {
    if (created) await kubectl(['delete', 'namespace', name, '--wait=false']);
  });
  return { name };
}

/**
 * A busybox pod in `namespace` running `command` (sh -c); `specYaml` goes under spec (two spaces in),
 * `containerYaml` under its one container (four spaces in).
 */
export function busyboxPod(
  namespace: string,
  name: string,
  command: string,
  extra: { containerYaml?: string; specYaml?: string; labels?: Record<string, string> } = {},
): string {
  const labels = Object.entries(extra.labels ?? { app: name })
    .map(([k, v]) => `    ${k}: "${v}"`)
    .join('\n');
  return `apiVersion: v1
kind: Pod
metadata:
  name: ${name}
  namespace: ${namespace}
  labels:
${labels}
spec:
  terminationGracePeriodSeconds: 2
${extra.specYaml ?? ''}
  containers:
  - name: main
    image: ${image('BUSYBOX_IMAGE')}
    command: [sh, -c, ${JSON.stringify(command)}]
${extra.containerYaml ?? ''}
`;
}

/** A Deployment of busybox pods labelled app=<name>, its one container `main` running `command` (sh -c). */
export function busyboxDeployment(namespace: string, name: string, replicas: number, command: string, extra: { image?: string; containerYaml?: string } = {}): string {
  return `apiVersion: apps/v1
kind: Deployment
metadata: {name: ${name}, namespace: ${namespace}}
spec:
  replicas: ${replicas}
  selector: {matchLabels: {app: ${name}}}
  strategy: {rollingUpdate: {maxSurge: 1, maxUnavailable: 1}}
  template:
    metadata: {labels: {app: ${name}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: ${extra.image ?? image('BUSYBOX_IMAGE')}
        command: [sh, -c, ${JSON.stringify(command)}]
${(extra.containerYaml ?? '').replace(/^/gm, '        ')}
`;
}

/** Whether `kind/name` is gone from the API (get --ignore-not-found prints nothing). */
export async function isGone(namespace: string, kind: string, name: string): Promise<boolean> {
  return (await kubectl(['-n', namespace, 'get', kind, name, '--ignore-not-found', '-o', 'name'])).trim() === '';
}

/** A Service in front of the pods labelled app=<app>, port 80 to their 8080. */
export function httpService(namespace: string, name: string, app: string, type: 'ClusterIP' | 'NodePort' = 'ClusterIP'): string {
  return `apiVersion: v1
kind: Service
metadata: {name: ${name}, namespace: ${namespace}}
spec:
  type: ${type}
  selector: {app: ${app}}
  ports: [{port: 80, targetPort: 8080}]
`;
}

/** Pulls images through the node runtime's CRI socket, as an operator's crictl pull does (no container uses them). */
export async function pullOnNode(images: string[]): Promise<void> {
  const cri = criClients(criSocket());
  try {
    for (const img of images) await cri.image.pullImage(PullImageRequest.fromPartial({ image: { image: img } }));
  } finally {
    cri.close();
  }
}

/** Until the (re)started kubelet answers on its healthz port, then until its node is Ready. */
export async function waitForKubelet(timeoutMs = 120_000): Promise<void> {
  await waitFor('the kubelet to answer on 127.0.0.1:10248', timeoutMs, async () => (await fetch('http://127.0.0.1:10248/healthz', { signal: AbortSignal.timeout(2000) })).ok);
  await waitFor('the node Ready', timeoutMs, async () => {
    const node = await getJson<{ status: { conditions: { type: string; status: string }[] } }>(['node', NODE_NAME]);
    return node.status.conditions.some((c) => c.type === 'Ready' && c.status === 'True');
  });
}

/**
 * restart.sh: stops one of the cluster's processes with `signal` and starts it again (`env` reaches the
 * script: KUBELET_CONFIG_PATCH); then waits until the kubelet answers and its node is Ready, or until
 * the runtime (Stove, or containerd on a CLUSTER_RUNTIME=containerd node) answers on its socket.
 */
export async function restartOnNode(name: 'kubelet' | NodeRuntime, signal: 'TERM' | 'KILL' = 'TERM', env: Record<string, string> = {}): Promise<void> {
  const result = await execa(join(CLUSTER_SCRIPTS, 'restart.sh'), [name, signal], { reject: false, all: true, env });
  if (result.exitCode !== 0) throw new Error(`restart.sh ${name} ${signal}: ${result.all}`);
  if (name === 'kubelet') await waitForKubelet();
  else await waitFor(`${name} to answer Version again`, 60_000, () => runtimeAnswers(name));
}

async function runtimeAnswers(name: NodeRuntime): Promise<boolean> {
  const cri = criClients(criSocket());
  try {
    return (await cri.runtime.version({ version: 'v1' })).runtimeName === name;
  } finally {
    cri.close();
  }
}
