/** Memory of the runtimes' processes, and the container config every pod benchmark runs. */
import { readdir, readFile } from 'node:fs/promises';
import { ContainerConfig } from '../../src/gen/runtime/v1/api.js';

/**
 * RSS and PSS of a process in KiB (0 when it is gone), and the anonymous part of the RSS (heap, stacks;
 * the rest is file-backed: the executable's and libraries' pages).
 */
export async function memoryOf(pid: number): Promise<{ rss: number; pss: number; anonymous: number }> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0);
  return { rss: field('Rss'), pss: field('Pss'), anonymous: field('Anonymous') };
}

/** Processes whose command line matches. */
export async function pidsWhere(match: (argv: string[]) => boolean): Promise<number[]> {
  const out: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const argv = (await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '')).split('\0');
    if (match(argv)) out.push(Number(name));
  }
  return out;
}

export const mib = (kib: number) => `${(kib / 1024).toFixed(1)} MiB`;

/** A busybox `sleep` as a kubelet would create it (limits, OOM score, log path, label). */
export function sleepContainerConfig(image: string, name: string): ContainerConfig {
  return ContainerConfig.fromPartial({
    metadata: { name, attempt: 0 },
    image: { image },
    command: ['sleep', '3600'],
    logPath: `${name}/0.log`,
    labels: { 'io.kubernetes.container.name': name },
    linux: { resources: { cpuShares: 2n, memoryLimitInBytes: 64n << 20n, oomScoreAdj: 1000n }, securityContext: { namespaceOptions: {} } },
  });
}
