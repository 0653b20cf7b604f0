/**
 * Container and pod usage, read from cgroups (v1 or v2, through platform/cgroups.ts), the writable layer
 * and the pod's network interface. Timestamps are ns. cri/stats-convert.ts puts them in the CRI's terms.
 *
 * A writable layer's usage is walked at most once every 10 s per container (LAYER_USAGE_REFRESH_MS);
 * cgroup counters are read on every call.
 *
 * The CPU rate (`usage_nano_cores`) is the rate since the previous reading of the same container or pod
 * (the kubelet's CRI stats provider relies on the runtime for it, as containerd computes it); the first
 * reading has none.
 */
import { nowNs } from '../common/clock.js';
import { messageOf } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import { processInterfaceStats, type InterfaceStats } from '../network/netns-exec.js';
import { readCgroupStats, type CgroupLayout, type CgroupStats } from '../platform/cgroups.js';
import { cgroupOfParent } from '../sandbox/resize.js';
import { podConfigOf, type SandboxRecord } from '../sandbox/model.js';
import type { ImageStores } from '../images/image-stores.js';
import type { DiskUsage } from '../storage/rootfs.js';
import type { ContainerRecord } from '../container/model.js';

export interface StatsReaderOptions {
  cgroups: CgroupLayout;
  /** The writable layer's usage and the dir that names its filesystem. */
  images: Pick<ImageStores, 'rootfsUsage' | 'writableLayerFs'>;
  log: Logger;
  /** How long a walk of a writable layer stands (default LAYER_USAGE_REFRESH_MS). */
  layerUsageRefreshMs?: number;
}

/** One reading of a container. */
export interface ContainerUsage {
  record: ContainerRecord;
  timestamp: bigint;
  /** Its cgroup's counters; undefined when the cgroup is gone. */
  cgroup?: CgroupStats;
  /** CPU rate since the previous reading, in billionths of a core; undefined on the first. */
  nanoCores?: bigint;
  /** The writable layer: the filesystem it is on and what it uses there. */
  writableLayer: { mountpoint: string; bytes: bigint; inodes: bigint };
}

/** One reading of a pod. */
export interface PodUsage {
  sandbox: SandboxRecord;
  timestamp: bigint;
  /** Summed over the pause container and the live containers; pressure is the pod cgroup's own. */
  cgroup?: CgroupStats;
  nanoCores?: bigint;
  /** The pod's interface (eth0), when it has a network namespace of its own. */
  network?: { timestamp: bigint; interface: InterfaceStats };
  containers: ContainerUsage[];
}

interface CpuSample {
  timestampNs: bigint;
  usageNs: bigint;
}

/** CPU samples older than this are dropped (the kubelet asks every 10–15 s). */
const SAMPLE_TTL_NS = 10n * 60n * 1_000_000_000n;

/**
 * How long a walk of a writable layer stands for its usage: containerd's CRI refreshes snapshot usage
 * every 10 s (stats_collect_period) and answers from that, cAdvisor every minute.
 */
const LAYER_USAGE_REFRESH_MS = 10_000;

/** Pod network interface the kubelet reports (the CNI convention). */
const POD_INTERFACE = 'eth0';

export class StatsReader {
  private readonly samples = new Map<string, CpuSample>();
  private lastPrune = 0n;
  /** The last walk of each container's writable layer (layerUsage). */
  private readonly layers = new Map<string, { at: number; usage: Promise<DiskUsage> }>();
  private layersPrunedAt = 0;

  constructor(private readonly options: StatsReaderOptions) {}

  /** Usage of one container; cgroup counters are absent when its cgroup is gone. */
  async containerStats(r: ContainerRecord): Promise<ContainerUsage> {
    const [cgroup, layer] = await Promise.all([this.cgroupStats(r.cgroupsPath), this.layerUsage(r.id)]);
    const timestamp = nowNs();
    return {
      record: r,
      timestamp,
      cgroup,
      nanoCores: this.cpuRate(r.id, cgroup, timestamp),
      writableLayer: { mountpoint: this.options.images.writableLayerFs(r.id), bytes: layer.bytes, inodes: layer.inodes },
    };
  }

  /**
   * Usage of a pod: CPU, memory and process count summed over the pause container and the pod's
   * containers (whatever cgroup parent the pod has), network counters of the pod's interface.
   */
  async podStats(sandbox: SandboxRecord, containers: ContainerRecord[]): Promise<PodUsage> {
    const [pause, containerStats, network] = await Promise.all([
      this.cgroupStats(sandbox.cgroupsPath),
      Promise.all(containers.map((c) => this.containerStats(c))),
      this.network(sandbox),
    ]);
    // The live containers' own readings (each cgroup read once per call, not again for the sum).
    const cgroups = [pause, ...containerStats.filter((u) => u.record.state !== 'exited').map((u) => u.cgroup)];
    const total = sumStats(cgroups);
    // Pressure cannot be summed: it is the pod cgroup's own, when the pod has one (cgroup_parent).
    const pressure = await this.podPressure(sandbox);
    if (total && pressure) total.pressure = pressure;
    const timestamp = nowNs();
    return { sandbox, timestamp, cgroup: total, nanoCores: this.cpuRate(`pod:${sandbox.id}`, total, timestamp), network, containers: containerStats };
  }

  /**
   * A container's writable layer usage, walked at most once per LAYER_USAGE_REFRESH_MS (calls in the
   * meantime share the last walk, or the one under way): the walk stats every file of the layer, and
   * a kubelet asks for every container's stats every 10–15 s, twice (container and pod stats).
   */
  private layerUsage(containerId: string): Promise<DiskUsage> {
    const now = performance.now();
    const refreshMs = this.options.layerUsageRefreshMs ?? LAYER_USAGE_REFRESH_MS;
    const known = this.layers.get(containerId);
    if (known && now - known.at < refreshMs) return known.usage;
    if (now - this.layersPrunedAt > refreshMs) {
      // Removed containers' walks go once nobody asked for a while.
      this.layersPrunedAt = now;
      for (const [id, walk] of this.layers) if (now - walk.at > 2 * refreshMs) this.layers.delete(id);
    }
    const usage = this.options.images.rootfsUsage(containerId);
    this.layers.set(containerId, { at: now, usage });
    return usage;
  }

  /** Forgets samples nobody asked about for a while (removed containers and pods). */
  private prune(now: bigint): void {
    this.lastPrune = now;
    for (const [key, sample] of this.samples) if (now - sample.timestampNs > SAMPLE_TTL_NS) this.samples.delete(key);
  }

  private async cgroupStats(cgroupsPath: string): Promise<CgroupStats | undefined> {
    if (!cgroupsPath) return undefined;
    try {
      return await readCgroupStats(this.options.cgroups, cgroupsPath);
    } catch {
      return undefined; // gone (removed container, stopped pod)
    }
  }

  /** The pressure of the pod's own cgroup (its cgroup_parent), if its config names one; v1 has none. */
  private async podPressure(sandbox: SandboxRecord): Promise<CgroupStats['pressure']> {
    const parent = podConfigOf(sandbox).linux?.cgroupParent;
    if (!parent || this.options.cgroups.version !== 2) return undefined;
    try {
      return (await this.cgroupStats(cgroupOfParent(parent, sandbox.cgroupsPath.includes(':') ? 'systemd' : 'cgroupfs')))?.pressure;
    } catch {
      return undefined;
    }
  }

  /** Records this CPU reading and returns the rate since the previous one of the same key. */
  private cpuRate(key: string, cg: CgroupStats | undefined, timestamp: bigint): bigint | undefined {
    if (!cg?.cpu) return undefined;
    const usageNs = cg.cpu.usageNs;
    const previous = this.samples.get(key);
    this.samples.set(key, { timestampNs: timestamp, usageNs });
    if (this.samples.size > 64 && timestamp - this.lastPrune > SAMPLE_TTL_NS) this.prune(timestamp);
    if (!previous || timestamp <= previous.timestampNs || usageNs < previous.usageNs) return undefined;
    return ((usageNs - previous.usageNs) * 1_000_000_000n) / (timestamp - previous.timestampNs);
  }

  private async network(sandbox: SandboxRecord): Promise<PodUsage['network']> {
    if (!sandbox.netnsPath || sandbox.pausePid <= 0) return undefined;
    try {
      return { timestamp: nowNs(), interface: await processInterfaceStats(sandbox.pausePid, POD_INTERFACE) };
    } catch (err) {
      this.options.log.debug('no network stats for pod', { sandbox: sandbox.id, error: messageOf(err) });
      return undefined;
    }
  }
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
