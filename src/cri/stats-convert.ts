/** Container and pod usage (stats/stats.ts) in the CRI's terms: ContainerStats and PodSandboxStats. */
import { ContainerStats, PodSandboxStats, type CpuUsage, type IoUsage, type MemoryUsage, type NetworkUsage, type PsiStats, type DeepPartial } from '../gen/runtime/v1/api.js';
import type { ContainerUsage, PodUsage } from '../stats/stats.js';
import { containerConfigOf } from '../container/model.js';
import type { CgroupStats, Pressure, PressureLine } from '../platform/cgroups.js';
import { podConfigOf } from '../sandbox/model.js';

const u64 = (value: bigint | undefined) => (value === undefined ? undefined : { value });

export function toContainerStats(u: ContainerUsage): ContainerStats {
  const config = containerConfigOf(u.record);
  return ContainerStats.fromPartial({
    attributes: { id: u.record.id, metadata: config.metadata, labels: config.labels, annotations: config.annotations },
    cpu: cpu(u.cgroup, u.nanoCores, u.timestamp),
    memory: memory(u.cgroup, u.timestamp),
    io: io(u.cgroup, u.timestamp),
    writableLayer: {
      timestamp: u.timestamp,
      fsId: { mountpoint: u.writableLayer.mountpoint },
      usedBytes: { value: u.writableLayer.bytes },
      inodesUsed: { value: u.writableLayer.inodes },
    },
  });
}

export function toPodSandboxStats(u: PodUsage): PodSandboxStats {
  const config = podConfigOf(u.sandbox);
  const pids = u.cgroup?.pids;
  return PodSandboxStats.fromPartial({
    attributes: { id: u.sandbox.id, metadata: config.metadata, labels: config.labels, annotations: config.annotations },
    linux: {
      cpu: cpu(u.cgroup, u.nanoCores, u.timestamp),
      memory: memory(u.cgroup, u.timestamp),
      io: io(u.cgroup, u.timestamp),
      network: network(u.network),
      process: pids ? { timestamp: u.timestamp, processCount: { value: pids.current } } : undefined,
      containers: u.containers.map(toContainerStats),
    },
  });
}

function cpu(cg: CgroupStats | undefined, nanoCores: bigint | undefined, timestamp: bigint): DeepPartial<CpuUsage> | undefined {
  if (!cg?.cpu) return undefined;
  return { timestamp, usageCoreNanoSeconds: { value: cg.cpu.usageNs }, usageNanoCores: u64(nanoCores), psi: psi(cg.pressure?.cpu) };
}

function memory(cg: CgroupStats | undefined, timestamp: bigint): DeepPartial<MemoryUsage> | undefined {
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
function io(cg: CgroupStats | undefined, timestamp: bigint): DeepPartial<IoUsage> | undefined {
  const p = psi(cg?.pressure?.io);
  return p ? { timestamp, psi: p } : undefined;
}

/** A `*.pressure` file in the CRI's terms (PsiData fields are capitalised in the proto). */
function psi(p: Pressure | undefined): DeepPartial<PsiStats> | undefined {
  if (!p) return undefined;
  const data = (l: PressureLine | undefined) => (l ? { Total: l.total, Avg10: l.avg10, Avg60: l.avg60, Avg300: l.avg300 } : undefined);
  return { Full: data(p.full), Some: data(p.some) };
}

function network(n: PodUsage['network']): DeepPartial<NetworkUsage> | undefined {
  if (!n) return undefined;
  const s = n.interface;
  const iface = { name: s.name, rxBytes: { value: s.rxBytes }, rxErrors: { value: s.rxErrors }, txBytes: { value: s.txBytes }, txErrors: { value: s.txErrors } };
  return { timestamp: n.timestamp, defaultInterface: iface, interfaces: [iface] };
}
