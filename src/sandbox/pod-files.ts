/**
 * Files a pod's containers share, kept in the pod's volatile dir: hostname, resolv.conf, hosts, and
 * the pod's /dev/shm tmpfs. Written before the pause container starts; the shm tmpfs is unmounted
 * when the pod stops and everything is removed with the pod.
 */
import { copyFile, mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { DNSConfig } from '../gen/runtime/v1/api.js';
import { mount, unmount } from '../platform/mount.js';

/** 64 MiB, as containerd and CRI-O size a pod's /dev/shm. */
export const POD_SHM_BYTES = 64 * 1024 * 1024;
/** A host-IPC pod shares the host's /dev/shm. */
export const HOST_SHM = '/dev/shm';

export interface PodFiles {
  hostnamePath: string;
  resolvConfPath: string;
  hostsPath: string;
  /** The pod's /dev/shm source: its own tmpfs in the state dir, or `/dev/shm` for host IPC. */
  shmPath: string;
}

/** The paths of a pod's files inside its volatile dir. */
export function podFilePaths(stateDir: string, hostIpc: boolean): PodFiles {
  return {
    hostnamePath: join(stateDir, 'hostname'),
    resolvConfPath: join(stateDir, 'resolv.conf'),
    hostsPath: join(stateDir, 'hosts'),
    shmPath: hostIpc ? HOST_SHM : join(stateDir, 'shm'),
  };
}

/** True when the pod has its own shm tmpfs (which Stove mounts and unmounts). */
export function ownsShm(files: PodFiles): boolean {
  return files.shmPath !== HOST_SHM && files.shmPath !== '';
}

/** resolv.conf text for a CRI DNSConfig, or undefined when it asks for nothing. */
export function resolvConfFor(dns: DNSConfig | undefined): string | undefined {
  if (!dns || (dns.servers.length === 0 && dns.searches.length === 0 && dns.options.length === 0)) return undefined;
  const lines: string[] = [];
  if (dns.searches.length) lines.push(`search ${dns.searches.join(' ')}`);
  for (const server of dns.servers) lines.push(`nameserver ${server}`);
  if (dns.options.length) lines.push(`options ${dns.options.join(' ')}`);
  return lines.join('\n') + '\n';
}

const FALLBACK_HOSTS = '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n';

/** Writes hostname, resolv.conf and hosts (the host's copies unless DNSConfig says otherwise). */
export async function writePodFiles(files: PodFiles, hostname: string, dns: DNSConfig | undefined): Promise<void> {
  const resolv = resolvConfFor(dns);
  await Promise.all([
    writeFile(files.hostnamePath, hostname + '\n', { mode: 0o644 }),
    resolv !== undefined
      ? writeFile(files.resolvConfPath, resolv, { mode: 0o644 })
      : copyFile('/etc/resolv.conf', files.resolvConfPath).catch(() => writeFile(files.resolvConfPath, '', { mode: 0o644 })),
    copyFile('/etc/hosts', files.hostsPath).catch(() => writeFile(files.hostsPath, FALLBACK_HOSTS, { mode: 0o644 })),
  ]);
}

/** Mounts the pod's shm tmpfs (64 MiB, nosuid,nodev,noexec); nothing for host IPC. */
export async function mountPodShm(files: PodFiles): Promise<void> {
  if (!ownsShm(files)) return;
  await mkdir(files.shmPath, { recursive: true, mode: 0o755 });
  await mount({
    type: 'tmpfs',
    source: 'shm',
    target: files.shmPath,
    options: ['nosuid', 'nodev', 'noexec', 'mode=1777', `size=${POD_SHM_BYTES}`],
  });
}

/** Unmounts the pod's shm tmpfs (lazily: a leftover user must not block a stop); never the host's. */
export async function unmountPodShm(files: PodFiles): Promise<void> {
  if (ownsShm(files)) await unmount(files.shmPath, true);
}

/** Unmounts the shm tmpfs and removes the files; missing pieces are fine. */
export async function removePodFiles(files: PodFiles): Promise<void> {
  await unmountPodShm(files);
  if (ownsShm(files)) await rm(files.shmPath, { recursive: true, force: true });
  await Promise.all([files.hostnamePath, files.resolvConfPath, files.hostsPath].map((p) => rm(p, { force: true })));
}
