/**
 * Where each kind of object keeps its files. Persistent data lives under `root` (survives reboots),
 * volatile data under `state` (a tmpfs such as /run: gone after a reboot, like the processes it tracks).
 */
import { join } from 'node:path';
import type { Config } from './schema.js';

export interface Paths {
  /** Content-addressed blobs, unpacked layers, image records. */
  imagesDir: string;
  /** Per-sandbox persistent dir: metadata and status JSON. */
  sandboxDir: (id: string) => string;
  /** Per-sandbox volatile dir: hostname, resolv.conf, hosts, shm mount, pause bundle. */
  sandboxStateDir: (id: string) => string;
  /** Per-container persistent dir: metadata and status JSON. */
  containerDir: (id: string) => string;
  /** Per-container volatile dir: OCI bundle (config.json, rootfs mount point), conmon files. */
  containerStateDir: (id: string) => string;
  /** Where conmon writes `<id>` with the exit code. */
  exitsDir: string;
  /** Where conmon puts attach socket links (kept short for the 108-byte sun_path limit). */
  attachDir: string;
  /** Pinned network namespaces. */
  netnsDir: string;
  /** runc's own state (`runc --root`). */
  runcRoot: string;
  /** Exec sessions' process specs and conmon files. */
  execDir: string;
  /** CNI results per pod and network. Persistent, like libcni's /var/lib/cni: host-local IP reservations outlive reboots too. */
  cniCacheDir: string;
  /** Records Stove could not read, kept for an operator (persist/quarantine.ts). */
  quarantineDir: string;
  /** Stove's own place for checkpoint archives (allowed besides `runtime.checkpoint_dirs`). */
  checkpointsDir: string;
}

/** The layout for a config; two daemons with different root/state never share a file. */
export function pathsFor(config: Pick<Config, 'root' | 'state'>): Paths {
  return {
    imagesDir: join(config.root, 'images'),
    sandboxDir: (id) => join(config.root, 'sandboxes', id),
    sandboxStateDir: (id) => join(config.state, 'sandboxes', id),
    containerDir: (id) => join(config.root, 'containers', id),
    containerStateDir: (id) => join(config.state, 'containers', id),
    exitsDir: join(config.state, 'exits'),
    attachDir: join(config.state, 'attach'),
    netnsDir: join(config.state, 'netns'),
    runcRoot: join(config.state, 'runc'),
    execDir: join(config.state, 'exec'),
    cniCacheDir: join(config.root, 'cni', 'results'),
    quarantineDir: join(config.root, 'quarantine'),
    checkpointsDir: join(config.root, 'checkpoints'),
  };
}

/** Every directory checkpoint archives may be written to or restored from. */
export function checkpointDirs(config: Pick<Config, 'root' | 'runtime'>): string[] {
  return [...config.runtime.checkpointDirs, join(config.root, 'checkpoints')];
}

/** The running daemon's list of NRI plugins, for `stove check`. */
export function nriStatusFile(config: Pick<Config, 'state'>): string {
  return join(config.state, 'nri-plugins.json');
}
