/**
 * Container and pod statistics in the CRI's terms, read from cgroups (v1 or v2, through
 * platform/cgroups.ts), the writable layer and the pod's network interface. Timestamps are ns.
 *
 * `usage_nano_cores` is the CPU rate since the previous reading of the same container or pod (the
 * kubelet's CRI stats provider relies on the runtime for it, as containerd computes it); the first
 * reading has none.
 */
import { dirname } from 'node:path';
import { ContainerStats, PodSandboxStats, type CpuUsage, type IoUsage, type MemoryUsage, type NetworkUsage, type PsiStats } from '../gen/runtime/v1/api.js';
import { nowNs } from '../common/clock.js';
import { messageOf } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import { processInterfaceStats } from '../network/netns-exec.js';
import { readCgroupStats, type CgroupLayout, type CgroupStats, type Pressure, type PressureLine } from '../platform/cgroups.js';
import { cgroupOfParent } from '../sandbox/resize.js';
import { podConfigOf, type SandboxRecord } from '../sandbox/model.js';
import type { ContainerImages } from './deps.js';
import { containerConfigOf, type ContainerRecord } from './model.js';

export interface StatsReaderOptions {
  cgroups: CgroupLayout;
  images: Pick<ContainerImages, 'rootfsUsage'>;
  /** Per-container persistent dir; its parent is the writable layers' filesystem id. */
  containerDir(id: string): string;
  log: Logger;
}

interface CpuSample {
  timestampNs: bigint;
  usageNs: bigint;
}

const u64 = (value: bigint | undefined) => (value === undefined ? undefined : { value });

/** CPU samples older than this are dropped (the kubelet asks every 10–15 s). */
const SAMPLE_TTL_NS = 10n * 60n * 1_000_000_000n;

/** Pod network interface the kubelet reports (the CNI convention). */
const POD_INTERFACE = 'eth0';

export class StatsReader {
  private readonly samples = new Map<string, CpuSample>();
  private lastPrune = 0n;

  constructor(private readonly o: StatsReaderOptions) {}

  /** Stats of one container; CPU and memory are absent when its cgroup is gone. */
  async containerStats(r: ContainerRecord): Promise<ContainerStats> {
    const config = containerConfigOf(r);
    const [cg, layer] = await Promise.all([this.cgroupStats(r.cgroupsPath), this.o.images.rootfsUsage(r.id)]);
    const timestamp = nowNs();
    return ContainerStats.fromPartial({
      attributes: { id: r.id, metadata: config.metadata, labels: config.labels, annotations: config.annotations },
      cpu: this.cpu(r.id, cg, timestamp),
      memory: memory(cg, timestamp),
      io: io(cg, timestamp),
      writableLayer: {
        timestamp,
        fsId: { mountpoint: dirname(this.o.containerDir(r.id)) },
        usedBytes: { value: layer.bytes },
        inodesUsed: { value: layer.inodes },
      },
    });
  }

  /**
   * Stats of a pod: CPU, memory and process count summed over the pause container and the pod's
   * containers (whatever cgroup parent the pod has), network counters of the pod's interface.
   */
  async podStats(sandbox: SandboxRecord, containers: ContainerRecord[]): Promise<PodSandboxStats> {
    const config = podConfigOf(sandbox);
    const live = containers.filter((c) => c.state !== 'exited');
    const [pause, containerStats, network] = await Promise.all([
      this.cgroupStats(sandbox.cgroupsPath),
      Promise.all(containers.map((c) => this.containerStats(c))),
      this.network(sandbox),
    ]);
    const cgroups = [pause, ...(await Promise.all(live.map((c) => this.cgroupStats(c.cgroupsPath))))];
    const total = sumStats(cgroups);
    // Pressure cannot be summed: it is the pod cgroup's own, when the pod has one (cgroup_parent).
    const pressure = (await this.podCgroupStats(sandbox))?.pressure;
    if (total && pressure) total.pressure = pressure;
    const timestamp = nowNs();
    return PodSandboxStats.fromPartial({
      attributes: { id: sandbox.id, metadata: config.metadata, labels: config.labels, annotations: config.annotations },
      linux: {
        cpu: this.cpu(`pod:${sandbox.id}`, total, timestamp),
        memory: memory(total, timestamp),
        io: io(total, timestamp),
        network,
        process: total?.pids ? { timestamp, processCount: { value: total.pids.current } } : undefined,
        containers: containerStats,
      },
    });
  }

  /** Forgets samples nobody asked about for a while (removed containers and pods). */
  private prune(now: bigint): void {
    this.lastPrune = now;
    for (const [key, sample] of this.samples) if (now - sample.timestampNs > SAMPLE_TTL_NS) this.samples.delete(key);
  }

  private async cgroupStats(cgroupsPath: string): Promise<CgroupStats | undefined> {
    if (!cgroupsPath) return undefined;
    try {
      return await readCgroupStats(this.o.cgroups, cgroupsPath);
    } catch {
      return undefined; // gone (removed container, stopped pod)
    }
  }

  /** The stats of the pod's own cgroup (its cgroup_parent), if its config names one. */
  private async podCgroupStats(sandbox: SandboxRecord): Promise<CgroupStats | undefined> {
    const parent = podConfigOf(sandbox).linux?.cgroupParent;
    if (!parent) return undefined;
    try {
      return await this.cgroupStats(cgroupOfParent(parent, sandbox.cgroupsPath.includes(':') ? 'systemd' : 'cgroupfs'));
    } catch {
      return undefined;
    }
  }

  private cpu(key: string, cg: CgroupStats | undefined, timestamp: bigint): CpuUsage | undefined {
    if (!cg?.cpu) return undefined;
    const usageNs = cg.cpu.usageNs;
    const previous = this.samples.get(key);
    this.samples.set(key, { timestampNs: timestamp, usageNs });
    if (this.samples.size > 64 && timestamp - this.lastPrune > SAMPLE_TTL_NS) this.prune(timestamp);
    let nanoCores: bigint | undefined;
    if (previous && timestamp > previous.timestampNs && usageNs >= previous.usageNs) {
      nanoCores = ((usageNs - previous.usageNs) * 1_000_000_000n) / (timestamp - previous.timestampNs);
    }
    return { timestamp, usageCoreNanoSeconds: { value: usageNs }, usageNanoCores: u64(nanoCores), psi: psi(cg.pressure?.cpu) };
  }

  private async network(sandbox: SandboxRecord): Promise<NetworkUsage | undefined> {
    if (!sandbox.netnsPath || sandbox.pausePid <= 0) return undefined;
    try {
      const s = await processInterfaceStats(sandbox.pausePid, POD_INTERFACE);
      const iface = { name: s.name, rxBytes: { value: s.rxBytes }, rxErrors: { value: s.rxErrors }, txBytes: { value: s.txBytes }, txErrors: { value: s.txErrors } };
      return { timestamp: nowNs(), defaultInterface: iface, interfaces: [iface] };
    } catch (err) {
      this.o.log.debug('no network stats for pod', { sandbox: sandbox.id, error: messageOf(err) });
      return undefined;
    }
  }
}

function memory(cg: CgroupStats | undefined, timestamp: bigint): MemoryUsage | undefined {
  const m = cg?.memory;
  if (!m) return undefined;
  return {
    timestamp,
    workingSetBytes: { value: m.workingSetBytes },
    availableBytes: u64(m.availableBytes),
    usageBytes: { value: m.usageBytes },
    rssBytes: { value: m.rssBytes },
    pageFaults: { value: m.pageFaults },
    majorPageFaults: { value: m.majorPageFaults },
    psi: psi(cg.pressure?.memory),
  };
}

/** Block I/O pressure; absent without PSI (cgroup v1). */
function io(cg: CgroupStats | undefined, timestamp: bigint): IoUsage | undefined {
  const p = psi(cg?.pressure?.io);
  return p ? { timestamp, psi: p } : undefined;
}

/** A `*.pressure` file in the CRI's terms (PsiData fields are capitalised in the proto). */
export function psi(p: Pressure | undefined): PsiStats | undefined {
  if (!p) return undefined;
  const data = (l: PressureLine | undefined) => (l ? { Total: l.total, Avg10: l.avg10, Avg60: l.avg60, Avg300: l.avg300 } : undefined);
  return { Full: data(p.full), Some: data(p.some) };
}

/** Adds up cgroup stats (limits are not summed: a pod total has none). */
export function sumStats(all: (CgroupStats | undefined)[]): CgroupStats | undefined {
  const present = all.filter((s): s is CgroupStats => s !== undefined);
  if (present.length === 0) return undefined;
  const out: CgroupStats = {};
  for (const s of present) {
    if (s.cpu) out.cpu = { usageNs: (out.cpu?.usageNs ?? 0n) + s.cpu.usageNs };
    if (s.memory) {
      const m = out.memory ?? { usageBytes: 0n, workingSetBytes: 0n, rssBytes: 0n, pageFaults: 0n, majorPageFaults: 0n };
      out.memory = {
        usageBytes: m.usageBytes + s.memory.usageBytes,
        workingSetBytes: m.workingSetBytes + s.memory.workingSetBytes,
        rssBytes: m.rssBytes + s.memory.rssBytes,
        pageFaults: m.pageFaults + s.memory.pageFaults,
        majorPageFaults: m.majorPageFaults + s.memory.majorPageFaults,
      };
    }
    if (s.pids) out.pids = { current: (out.pids?.current ?? 0n) + s.pids.current };
    if (s.oomKills !== undefined) out.oomKills = (out.oomKills ?? 0n) + s.oomKills;
  }
  return out;
}
