/**
 * The real kubelet in standalone mode, as the VM suite runs it: no API server and no kubeconfig, pods
 * only from its static pod directory, Stove's socket as its runtime, the cgroup driver of the test's
 * daemon. Everything it writes lives in a temporary directory (its root dir, manifests, pod logs); it
 * listens on loopback only, and its read-only port serves the pods as it sees them (`/pods`: for a
 * static pod, the status the kubelet computed from the runtime). `test/vm/run.sh --kubelet FILE` puts
 * the binary in the guest and names it in STOVE_VM_KUBELET.
 */
import { spawn } from 'node:child_process';
import { request } from 'node:https';
import { chmod, mkdir, mkdtemp, rename, rm, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stopChild, waitUntilServing } from '../helpers/child.js';
import { mountPoints, unmount } from '../../src/platform/mount.js';
import type { TestCgroupDriver } from '../helpers/cgroup-driver.js';

/** The node name the kubelet runs as: a static pod's name is its manifest's name + `-stove-node`. */
export const NODE_NAME = 'stove-node';
const HEALTHZ = 'http://127.0.0.1:10248/healthz';
const READ_ONLY = 'http://127.0.0.1:10255';
/** Its authenticated port (anonymous allowed here), with the self-signed certificate it makes itself. */
const SECURE = 'https://127.0.0.1:10250';

/** What the kubelet says of a pod on its read-only port (the fields the tests read). */
export interface KubeletPod {
  metadata: { name: string; namespace: string; uid: string };
  status: {
    phase?: string;
    podIP?: string;
    containerStatuses?: { name: string; ready: boolean; restartCount: number; containerID?: string; state: Record<string, unknown> }[];
  };
}

export interface Kubelet {
  dir: string;
  /** Its log so far (klog on stderr, --v=2). */
  log(): string;
  /** Writes `<name>.yaml` into the static pod directory. */
  addManifest(name: string, yaml: string): Promise<void>;
  /** Removes every manifest it was given. */
  removeManifests(): Promise<void>;
  /** `/pods` of the read-only port. */
  pods(): Promise<KubeletPod[]>;
  /**
   * The kubelet's checkpoint API (KEP-2008): `POST /checkpoint/{namespace}/{pod}/{container}`; resolves
   * with the archives it names (`{"items": [...]}`), rejects with its status and body otherwise.
   */
  checkpoint(namespace: string, pod: string, container: string, timeoutSeconds: number): Promise<string[]>;
  /** SIGTERM (SIGKILL after 20 s), then removes its directory and what it mounted there. */
  stop(): Promise<void>;
}

export interface KubeletOptions {
  bin: string;
  /** Stove's CRI socket. */
  socket: string;
  driver: TestCgroupDriver;
  /** Bound on the wait for its healthz (slow under software emulation). */
  startTimeoutMs: number;
  /** Its directory, made by makeKubeletDir (a new one by default): known before it starts, e.g. for Stove's config. */
  dir?: string;
}

/** A directory for a kubelet (mode 0711); its root dir will be `<dir>/root`, its checkpoints `<dir>/root/checkpoints`. */
export async function makeKubeletDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'stove-kubelet-'));
  await chmod(dir, 0o711);
  return dir;
}

function configYaml(dir: string, o: KubeletOptions): string {
  return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
readOnlyPort: 10255
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://${o.socket}
cgroupDriver: ${o.driver}
failSwapOn: false
staticPodPath: ${join(dir, 'manifests')}
fileCheckFrequency: 2s
syncFrequency: 10s
podLogsDir: ${join(dir, 'pod-logs')}
resolvConf: ${join(dir, 'resolv.conf')}
# The guest's disk and memory are small: no eviction for a test's few pods.
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
shutdownGracePeriod: 0s
`;
}

export async function startKubelet(o: KubeletOptions): Promise<Kubelet> {
  const dir = o.dir ?? (await makeKubeletDir());
  const manifests = join(dir, 'manifests');
  await mkdir(manifests);
  await mkdir(join(dir, 'pod-logs'));
  await writeFile(join(dir, 'resolv.conf'), 'search stove.test\noptions ndots:1\n');
  await writeFile(join(dir, 'config.yaml'), configYaml(dir, o));
  const names: string[] = [];

  const child = spawn(o.bin, ['--config', join(dir, 'config.yaml'), '--root-dir', join(dir, 'root'), '--hostname-override', NODE_NAME, '--v', '2'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));

  const stop = async () => {
    await stopChild(child, 20_000);
    // Its root dir may hold mounts of pods' volumes; none may stay when the directory goes.
    const mounts = [...(await mountPoints())].filter((m) => m.startsWith(dir + '/')).sort((a, b) => b.length - a.length);
    for (const m of mounts) await unmount(m, true).catch(() => {});
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await waitUntilServing('the kubelet to answer on its healthz port', child, () => out, async () => (await get(HEALTHZ).catch(() => '')) === 'ok', o.startTimeoutMs);
  } catch (err) {
    await stop();
    throw err;
  }

  return {
    dir,
    log: () => out,
    async addManifest(name, yaml) {
      // Written aside and renamed, so the kubelet never reads half a manifest.
      await writeFile(join(dir, `.${name}.yaml`), yaml);
      await rename(join(dir, `.${name}.yaml`), join(manifests, `${name}.yaml`));
      names.push(name);
    },
    async removeManifests() {
      for (const name of names.splice(0)) await unlink(join(manifests, `${name}.yaml`)).catch(() => {});
    },
    async pods() {
      return (JSON.parse(await get(`${READ_ONLY}/pods`)) as { items: KubeletPod[] }).items ?? [];
    },
    async checkpoint(namespace, pod, container, timeoutSeconds) {
      const path = ['checkpoint', namespace, pod, container].map(encodeURIComponent).join('/');
      const body = await post(`${SECURE}/${path}?timeout=${timeoutSeconds}`, (timeoutSeconds + 30) * 1000);
      return (JSON.parse(body) as { items: string[] }).items;
    },
    stop,
  };
}

/** The body of a GET on loopback, bounded to 5 s; a status other than 200 is an error. */
async function get(url: string): Promise<string> {
  const res = await fetch(url, { signal: AbortSignal.timeout(5000) });
  const body = await res.text();
  if (res.status !== 200) throw new Error(`GET ${url}: ${res.status} ${body.slice(0, 200)}`);
  return body;
}

/** The body of a POST to the kubelet's own HTTPS port on loopback (its certificate is self-signed), bounded. */
function post(url: string, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', rejectUnauthorized: false, signal: AbortSignal.timeout(timeoutMs) }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`POST ${url}: ${res.statusCode} ${body.slice(0, 500)}`))));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}
