/**
 * The single-node cluster of test/e2e/cluster/ for benchmarks: up.sh on a runtime, down.sh, and the
 * cluster's API over HTTPS with the admin's certificate (requests, watches, the kubelet's /metrics
 * through the API server's node proxy).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Agent, request } from 'undici';

export const CLUSTER_SCRIPTS = resolve(import.meta.dirname, '../../../test/e2e/cluster');
export const CLUSTER_DIR = process.env.CLUSTER_DIR ?? '/var/lib/stove-cluster';
export const NODE_NAME = 'stove-node';
const API_SERVER = 'https://10.250.0.1:6443';

export type ClusterRuntime = 'stove' | 'containerd';

/** A script of the cluster's, running; `kill` signals it (up.sh removes what it made on TERM). */
let running: ChildProcess | undefined;

function script(name: string, env: Record<string, string>, stdout: 'pipe' | 'ignore'): Promise<{ code: number | null; stdout: string }> {
  return new Promise((done, fail) => {
    // A group of its own: a ^C reaches only this script, which then stops the script itself (clusterDown).
    const child = spawn(join(CLUSTER_SCRIPTS, name), { env: { ...process.env, ...env }, stdio: ['ignore', stdout, 'inherit'], detached: true });
    running = child;
    let out = '';
    child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
    child.once('error', fail);
    child.once('exit', (code) => {
      running = undefined;
      done({ code, stdout: out });
    });
  });
}

/** The cluster up.sh started: where its binaries, runtime socket, logs and process ids are. */
export interface Cluster {
  runtime: ClusterRuntime;
  binDir: string;
  socket: string;
  api: KubeApi;
  /** The image references up.sh pushed (its images.env). */
  images: Record<string, string>;
  /** A process of the cluster's (stove, containerd, kubelet…) by its pid file. */
  pid(name: string): number;
  /** Its log file, `$CLUSTER_DIR/logs/<name>.log`. */
  log(name: string): string;
}

/** up.sh with `runtime` in Stove's place (`env` reaches it); refuses when a cluster is up already. */
export async function clusterUp(runtime: ClusterRuntime, env: Record<string, string> = {}): Promise<Cluster> {
  if (existsSync(join(CLUSTER_DIR, 'up'))) throw new Error(`a cluster is up in ${CLUSTER_DIR} already: remove it with ${CLUSTER_SCRIPTS}/down.sh first`);
  const up = await script('up.sh', { ...env, CLUSTER_RUNTIME: runtime }, 'pipe');
  if (up.code !== 0) throw new Error(`up.sh (CLUSTER_RUNTIME=${runtime}) failed with exit ${up.code}`);
  const binDir = readFileSync(join(CLUSTER_DIR, 'bin-dir'), 'utf8').trim();
  const images = Object.fromEntries(
    readFileSync(join(CLUSTER_DIR, 'images.env'), 'utf8')
      .split('\n')
      .filter((l) => l.includes('='))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
  const socket = runtime === 'stove' ? join(CLUSTER_DIR, 'stove/stove.sock') : join(CLUSTER_DIR, 'containerd/containerd.sock');
  return {
    runtime,
    binDir,
    socket,
    api: new KubeApi(join(CLUSTER_DIR, 'pki')),
    images,
    pid: (name) => Number(readFileSync(join(CLUSTER_DIR, 'pids', name), 'utf8')),
    log: (name) => join(CLUSTER_DIR, 'logs', `${name}.log`),
  };
}

let removing: Promise<void> | undefined;

/**
 * down.sh (safe with nothing up); a script still running (an up.sh, which then removes what it made)
 * is stopped first. A call while one runs waits for that one.
 */
export function clusterDown(): Promise<void> {
  removing ??= removeCluster().finally(() => (removing = undefined));
  return removing;
}

async function removeCluster(): Promise<void> {
  if (running) {
    const child = running;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await exited;
  }
  const down = await script('down.sh', {}, 'ignore');
  if (down.code !== 0) throw new Error(`down.sh failed with exit ${down.code}`);
}

/** The version line of one of the cluster's binaries (`kubelet --version`: `Kubernetes v1.36.0`). */
export function versionOf(binary: string, args = ['--version']): Promise<string> {
  return new Promise((done, fail) => {
    const child = spawn(binary, args, { stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.once('error', fail);
    child.once('exit', () => done(out.trim().split('\n')[0] ?? ''));
  });
}

/** A watch on the API: open once its response headers came (events from then on are seen). */
export interface Watch {
  /** Resolves when `onEvent` returned true, rejects when the stream broke first. */
  done: Promise<void>;
  close(): void;
}

/** The API server as the cluster's admin. */
export class KubeApi {
  private readonly agent: Agent;

  constructor(pki: string) {
    const file = (name: string) => readFileSync(join(pki, name));
    this.agent = new Agent({ connect: { ca: file('ca.crt'), cert: file('admin.crt'), key: file('admin.key') } });
  }

  /** A request answered with JSON (or text when `raw`); a status of 300 or more rejects with the answer. */
  async call<T = Record<string, unknown>>(method: 'GET' | 'POST' | 'DELETE' | 'PATCH', path: string, body?: unknown): Promise<T> {
    const res = await request(API_SERVER + path, {
      method,
      dispatcher: this.agent,
      // A PATCH is a JSON merge patch (RFC 7386).
      headers: body === undefined ? {} : { 'content-type': method === 'PATCH' ? 'application/merge-patch+json' : 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      headersTimeout: 60_000,
      bodyTimeout: 60_000,
    });
    const text = await res.body.text();
    if (res.statusCode >= 300) throw new ApiError(res.statusCode, `${method} ${path}: ${res.statusCode}: ${text.slice(0, 500)}`);
    return JSON.parse(text) as T;
  }

  async text(path: string): Promise<string> {
    const res = await request(API_SERVER + path, { dispatcher: this.agent, headersTimeout: 60_000, bodyTimeout: 60_000 });
    const text = await res.body.text();
    if (res.statusCode >= 300) throw new ApiError(res.statusCode, `GET ${path}: ${res.statusCode}: ${text.slice(0, 500)}`);
    return text;
  }

  /**
   * Watches `path` (a list path with its query, `watch=1` added) from `resourceVersion`; `onEvent` gets
   * each event as it arrives, until it returns true. Resolves once the API server answered the watch.
   */
  async watch<T>(path: string, resourceVersion: string, onEvent: (type: string, object: T) => boolean): Promise<Watch> {
    const abort = new AbortController();
    const sep = path.includes('?') ? '&' : '?';
    const res = await request(`${API_SERVER}${path}${sep}watch=1&resourceVersion=${resourceVersion}`, {
      dispatcher: this.agent,
      signal: abort.signal,
      headersTimeout: 60_000,
      bodyTimeout: 0,
    });
    if (res.statusCode >= 300) throw new ApiError(res.statusCode, `watch ${path}: ${res.statusCode}: ${(await res.body.text()).slice(0, 500)}`);
    const done = (async () => {
      let pending = '';
      for await (const chunk of res.body) {
        pending += (chunk as Buffer).toString();
        let nl: number;
        while ((nl = pending.indexOf('\n')) >= 0) {
          const line = pending.slice(0, nl);
          pending = pending.slice(nl + 1);
          if (!line.trim()) continue;
          const event = JSON.parse(line) as { type: string; object: T };
          if (event.type === 'ERROR') throw new Error(`watch ${path}: ${JSON.stringify(event.object)}`);
          // Leaving the loop destroys the response body: the watch's connection closes.
          if (onEvent(event.type, event.object)) return;
        }
      }
      throw new Error(`watch ${path} ended before its condition`);
    })();
    // close() makes the loop above reject: a watch closed early has no more to say.
    done.catch(() => {});
    return { done, close: () => abort.abort() };
  }

  close(): Promise<void> {
    return this.agent.close();
  }
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}
