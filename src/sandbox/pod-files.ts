/**
 * Files a pod's containers share, kept in the pod's volatile dir: hostname, resolv.conf, hosts, and
 * the pod's /dev/shm tmpfs. Written before the pause container starts; removed with the pod.
 */
import { copyFile, mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { DNSConfig } from '../gen/runtime/v1/api.js';
import { mount, unmount } from '../platform/mount.js';

/** 64 MiB, as containerd and CRI-O size a pod's /dev/shm. */
export const POD_SHM_BYTES = 64 * 1024 * 1024;

export interface PodFiles {
  hostnamePath: string;
  resolvConfPath: string;
  hostsPath: string;
  /** The pod's /dev/shm mount point ('' for host IPC, which uses the host's /dev/shm). */
  shmPath: string;
}

/** The paths of a pod's files inside its volatile dir. */
export function podFilePaths(stateDir: string, hostIpc: boolean): PodFiles {
  return {
    hostnamePath: join(stateDir, 'hostname'),
    resolvConfPath: join(stateDir, 'resolv.conf'),
    hostsPath: join(stateDir, 'hosts'),
    shmPath: hostIpc ? '' : join(stateDir, 'shm'),
  };
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

/** Writes hostname, resolv.conf and hosts, and mounts the shm tmpfs. */
export async function writePodFiles(files: PodFiles, hostname: string, dns: DNSConfig | undefined): Promise<void> {
  await writeFile(files.hostnamePath, hostname + '\n', { mode: 0o644 });
  const resolv = resolvConfFor(dns);
  if (resolv !== undefined) await writeFile(files.resolvConfPath, resolv, { mode: 0o644 });
  else await copyFile('/etc/resolv.conf', files.resolvConfPath).catch(() => writeFile(files.resolvConfPath, '', { mode: 0o644 }));
  await copyFile('/etc/hosts', files.hostsPath).catch(() =>
    writeFile(files.hostsPath, '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n', { mode: 0o644 }),
  );
  if (files.shmPath) {
    await mkdir(files.shmPath, { recursive: true, mode: 0o755 });
    await mount({
      type: 'tmpfs',
      source: 'shm',
      target: files.shmPath,
      options: ['nosuid', 'nodev', 'noexec', 'mode=1777', `size=${POD_SHM_BYTES}`],
    });
  }
}

/** Unmounts the shm tmpfs and removes the files; missing pieces are fine. */
export async function removePodFiles(files: PodFiles): Promise<void> {
  if (files.shmPath) {
    await unmount(files.shmPath, true);
    await rm(files.shmPath, { recursive: true, force: true });
  }
  await Promise.all([files.hostnamePath, files.resolvConfPath, files.hostsPath].map((p) => rm(p, { force: true })));
}
