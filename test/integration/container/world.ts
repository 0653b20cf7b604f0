/**
 * Containers through the CRI against a real `stove serve`: the sandbox tests' PodWorld (a daemon with
 * its own CNI bridge, range and cgroup parent) plus a loopback registry holding the test images, helpers
 * to run pods and containers, and the check that a test left nothing behind.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ContainerConfig, ContainerState, PullImageRequest, type DeepPartial, type PodSandboxConfig } from '../../../src/gen/runtime/v1/api.js';
import { startRegistry, type TestRegistry } from '../../helpers/registry.js';
import { suiteHooks } from '../../helpers/suite.js';
import { pushBusyboxImage, type BusyboxImageOptions, type PushedImage } from '../../helpers/image-builder.js';
import { conmonsUnder, PodWorld, skipReason as podSkipReason } from '../sandbox/world.js';
import { mountPoints } from '../../../src/platform/mount.js';
import { detectCgroups, dirIn } from '../../../src/platform/cgroups.js';
import { execa } from 'execa';
import { waitFor } from '../../helpers/wait.js';
import { TEST_RUNTIME } from '../../helpers/oci-runtime.js';

export { eventually, pidAlive, rejectsWith } from '../sandbox/world.js';

export function skipReason(): string | undefined {
  return podSkipReason();
}

/**
 * The hooks of a suite over `world` (call it in a `describe` body): start it, then `setup`; after each
 * test remove its containers (`scope: 'pods'`: every pod too) and fail a passing test that left
 * anything of them behind; clean up.
 */
export function containerSuite(world: ContainerWorld, what: string, options: { scope: 'containers' | 'pods'; setup?: () => Promise<void> }): void {
  const pods = options.scope === 'pods';
  suiteHooks({
    what,
    skipReason,
    setup: async () => {
      await world.start();
      await options.setup?.();
    },
    tidy: pods ? () => world.removeAll().catch(() => {}) : () => world.removeContainers(),
    leftovers: pods ? () => world.leftovers() : () => world.containerLeftovers(),
    cleanup: () => world.cleanup(),
  });
}

/** The images every container test can use, by short name. */
export const IMAGES: Record<string, BusyboxImageOptions> = {
  /** `sh` by default; users root, user (1000), www-data, nobody in /etc/passwd. */
  busybox: {},
  /** Never exits by itself. */
  sleeper: { cmd: ['sleep', '3600'] },
  /** Entrypoint + Cmd + Env + WorkingDir + User. */
  app: {
    entrypoint: ['/bin/sh', '-c'],
    cmd: ['echo "$GREETING from $(pwd) as $(id -u):$(id -g)"'],
    env: ['GREETING=hello', 'ONLY_IN_IMAGE=1'],
    workdir: '/srv/app',
    user: 'user',
    extraFiles: [{ type: 'dir', path: 'srv' }, { type: 'dir', path: 'srv/app', uid: 1000, gid: 1000 }],
  },
  /** Stops on SIGUSR1 (its StopSignal) with exit code 3; ignores SIGTERM. */
  usr1: {
    cmd: ['sh', '-c', 'trap "exit 3" USR1; trap "" TERM; echo ready; while true; do sleep 0.1; done'],
    stopSignal: 'SIGUSR1',
  },
};

export class ContainerWorld {
  readonly pods = new PodWorld();
  registry!: TestRegistry;
  readonly images = new Map<string, PushedImage>();

  async start(): Promise<void> {
    this.registry = await startRegistry();
    for (const [name, options] of Object.entries(IMAGES)) {
      this.images.set(name, await pushBusyboxImage(this.registry, `ctr/${name}:1`, options));
    }
    await this.pods.start();
    for (const image of this.images.values()) await this.runtime.pull(image.reference);
  }

  get daemon() {
    return this.pods.daemon;
  }

  get runtime() {
    const clients = this.pods.daemon.clients;
    return { ...clients.runtime, pull: (image: string) => clients.image.pullImage(PullImageRequest.fromPartial({ image: { image } })) };
  }

  image(name: string): PushedImage {
    const image = this.images.get(name);
    if (!image) throw new Error(`no test image ${name}`);
    return image;
  }

  /** Runs a pod (defaults from PodWorld) and returns its ID and config. */
  async pod(p: DeepPartial<PodSandboxConfig> = {}): Promise<{ id: string; config: PodSandboxConfig }> {
    const config = this.pods.pod(p);
    return { id: await this.pods.run(config), config };
  }

  /** A container config for `image` with a log path, overridden by `c`. */
  config(image: string, c: DeepPartial<ContainerConfig> = {}): ContainerConfig {
    const name = c.metadata?.name ?? `c${Math.random().toString(36).slice(2, 8)}`;
    return ContainerConfig.fromPartial({
      metadata: { name, attempt: 0 },
      image: { image: this.image(image).reference },
      logPath: `${name}.log`,
      ...c,
    });
  }

  async create(pod: { id: string; config: PodSandboxConfig }, config: ContainerConfig): Promise<string> {
    const res = await this.daemon.clients.runtime.createContainer({ podSandboxId: pod.id, config, sandboxConfig: pod.config });
    return res.containerId;
  }

  /** Creates and starts a container; returns its ID. */
  async run(pod: { id: string; config: PodSandboxConfig }, config: ContainerConfig): Promise<string> {
    const id = await this.create(pod, config);
    await this.daemon.clients.runtime.startContainer({ containerId: id });
    return id;
  }

  async status(id: string, verbose = false) {
    return this.daemon.clients.runtime.containerStatus({ containerId: id, verbose });
  }

  /** The verbose info document (pid, runtimeSpec, …). */
  async info(id: string): Promise<{ pid: number; runtimeSpec: any; bundle: string; rootfs: string; cgroupsPath: string }> {
    return JSON.parse((await this.status(id, true)).info.info!) as never;
  }

  /** Waits until the container is EXITED and returns its status. */
  async waitExited(id: string, timeoutMs = 10_000) {
    let state = 'unknown';
    const exited = async () => {
      const { status } = await this.status(id);
      state = ContainerState[status!.state];
      return status!.state === ContainerState.CONTAINER_EXITED ? status! : undefined;
    };
    return waitFor(`container ${id} to exit`, exited, timeoutMs).catch((err: unknown) => {
      throw new Error(`${(err as Error).message} (state ${state})`);
    });
  }

  /** ExecSync with the output as text. */
  async exec(id: string, cmd: string[], timeout = 10n): Promise<{ stdout: string; stderr: string; exitCode: number }> {
    const r = await this.daemon.clients.runtime.execSync({ containerId: id, cmd, timeout });
    return { stdout: r.stdout.toString(), stderr: r.stderr.toString(), exitCode: r.exitCode };
  }

  /** The log lines' contents (CRI format: `<time> <stream> <F|P> <text>`). */
  async logLines(path: string): Promise<{ stream: string; tag: string; text: string }[]> {
    const text = await readFile(path, 'utf8').catch(() => '');
    return text
      .split('\n')
      .filter(Boolean)
      .map((l) => {
        const [, stream, tag, ...rest] = l.split(' ');
        return { stream: stream!, tag: tag!, text: rest.join(' ') };
      });
  }

  /** Removes every container (but `keep`) through the CRI. */
  async removeContainers(keep?: string): Promise<void> {
    const rt = this.daemon.clients.runtime;
    const { containers } = await rt.listContainers({ filter: undefined });
    for (const c of containers) if (c.id !== keep) await rt.removeContainer({ containerId: c.id });
  }

  /** Removes every pod (and so every container) through the CRI. */
  async removeAll(): Promise<void> {
    await this.removeContainers();
    await this.pods.removeAllPods();
  }

  /** Everything a passing test must not leave: the pod world's list plus the containers' own. */
  async leftovers(): Promise<string[]> {
    return [...(await this.pods.leftovers()), ...(await this.containerLeftovers())];
  }

  /** What containers alone leave (pods may still exist): records, dirs, holds, mounts, runtime containers, conmons. */
  async containerLeftovers(): Promise<string[]> {
    const out: string[] = [];
    const { root, state } = this.daemon;
    const list = async (d: string) => (await readdir(d).catch(() => [] as string[])).filter((n) => !n.startsWith('.'));
    for (const [what, d] of [
      ['container records', join(root, 'containers')],
      ['container state dirs', join(state, 'containers')],
      ['image holds', join(root, 'images', 'holds')],
      ['exec dirs', join(state, 'exec')],
    ] as const) {
      const names = await list(d);
      if (names.length) out.push(`${what}: ${names.join(' ')}`);
    }
    const mounts = [...(await mountPoints())].filter((m) => m.startsWith(join(state, 'containers') + '/'));
    if (mounts.length) out.push(`container mounts: ${mounts.join(' ')}`);
    const pods = new Set((await list(join(root, 'sandboxes'))));
    const runc = await execa(TEST_RUNTIME, ['--root', join(state, 'runc'), 'list', '-q'], { reject: false });
    const containers = runc.stdout.split('\n').filter((id) => id && !pods.has(id));
    if (containers.length) out.push(`runc containers: ${containers.join(' ')}`);
    const conmons = await conmonsUnder(join(state, 'containers'));
    if (conmons.length) out.push(`conmon processes: ${conmons.join(' ')}`);
    const layout = await detectCgroups();
    const podCgroups = new Set([...pods].map((id) => this.pods.cgroupNameOf(id)));
    for (const h of layout.hierarchies) {
      const d = dirIn(h, this.pods.cgroupRootPath);
      const children = (await readdir(d, { withFileTypes: true }).catch(() => [])).filter((e) => e.isDirectory() && !podCgroups.has(e.name));
      if (children.length) out.push(`container cgroups in ${d}: ${children.map((e) => e.name).join(' ')}`);
    }
    return out;
  }

  async cleanup(): Promise<void> {
    await this.removeAll().catch(() => {});
    await this.pods.cleanup();
    await this.registry?.stop();
  }
}
