/**
 * CRI metrics (KEP-2371): what a kubelet with `PodAndContainerStatsFromCRI` serves on
 * /metrics/cadvisor, asked from the runtime. Names, help and types are cAdvisor's; label keys are `id`
 * and `name` plus the metric's own (`interface`, `device`, `failure_type`, `scope`), as containerd sends
 * them: the kubelet adds `namespace`, `pod` and `container` itself. Values are read from the cgroups,
 * the writable layer and the pod's network namespace, like the stats RPCs. The CRI carries integer
 * values, so seconds are whole seconds (containerd and CRI-O round the same way). cri/metrics-convert.ts puts
 * them in the CRI's terms.
 */
import { nowNs } from '../common/clock.js';
import { messageOf } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import { processNetDev, type InterfaceStats } from '../network/netns-exec.js';
import { readCgroupStats, type CgroupLayout, type CgroupStats } from '../platform/cgroups.js';
import { mountContaining, readMountInfo } from '../platform/proc.js';
import type { SandboxRecord } from '../sandbox/model.js';
import type { ImageStores } from '../images/image-stores.js';
import { resourcesOf, type ContainerRecord } from '../container/model.js';
import { sumStats } from './stats.js';

const BASE = ['id', 'name'];

/** A metric's name, help text and label keys (ListMetricDescriptors). */
export interface MetricDescription {
  name: string;
  help: string;
  labelKeys: string[];
}

export type MetricKind = 'counter' | 'gauge';

/** One value of a metric, its labels in the order of its description's keys. */
export interface MetricSample {
  name: string;
  kind: MetricKind;
  timestamp: bigint;
  labelValues: string[];
  value: bigint;
}

/** The samples of a pod and of each of its live containers. */
export interface PodMetricSamples {
  podSandboxId: string;
  samples: MetricSample[];
  containers: { containerId: string; samples: MetricSample[] }[];
}

interface Definition {
  descriptor: MetricDescription;
  kind: MetricKind;
}

const def = (name: string, help: string, kind: MetricKind, extra: string[] = []): Definition => ({
  descriptor: { name, help, labelKeys: [...BASE, ...extra] },
  kind,
});

const COUNTER = 'counter';
const GAUGE = 'gauge';

/** Every metric Stove reports, by name. */
const DEFINITIONS = new Map<string, Definition>(
  [
    def('container_cpu_usage_seconds_total', 'Cumulative cpu time consumed in seconds.', COUNTER),
    def('container_memory_usage_bytes', 'Current memory usage in bytes, including all memory regardless of when it was accessed', GAUGE),
    def('container_memory_working_set_bytes', 'Current working set in bytes.', GAUGE),
    def('container_memory_rss', 'Size of RSS in bytes.', GAUGE),
    def('container_memory_failures_total', 'Cumulative count of memory allocation failures.', COUNTER, ['failure_type', 'scope']),
    def('container_spec_memory_limit_bytes', 'Memory limit for the container.', GAUGE),
    def('container_oom_events_total', 'Count of out of memory events observed for the container', COUNTER),
    def('container_processes', 'Number of processes running inside the container.', GAUGE),
    def('container_fs_usage_bytes', 'Number of bytes that are consumed by the container on this filesystem.', GAUGE, ['device']),
    def('container_fs_inodes_total', 'Number of Inodes', GAUGE, ['device']),
    // Pressure stall time (cgroup v2 PSI), cAdvisor's names: "waiting" is the `some` line, "stalled" `full`.
    def('container_pressure_cpu_waiting_seconds_total', 'Total time duration tasks in the container have waited due to CPU congestion.', COUNTER),
    def('container_pressure_cpu_stalled_seconds_total', 'Total time duration no tasks in the container could make progress due to CPU congestion.', COUNTER),
    def('container_pressure_memory_waiting_seconds_total', 'Total time duration tasks in the container have waited due to memory congestion.', COUNTER),
    def('container_pressure_memory_stalled_seconds_total', 'Total time duration no tasks in the container could make progress due to memory congestion.', COUNTER),
    def('container_pressure_io_waiting_seconds_total', 'Total time duration tasks in the container have waited due to IO congestion.', COUNTER),
    def('container_pressure_io_stalled_seconds_total', 'Total time duration no tasks in the container could make progress due to IO congestion.', COUNTER),
    def('container_network_receive_bytes_total', 'Cumulative count of bytes received', COUNTER, ['interface']),
    def('container_network_receive_packets_total', 'Cumulative count of packets received', COUNTER, ['interface']),
    def('container_network_receive_packets_dropped_total', 'Cumulative count of packets dropped while receiving', COUNTER, ['interface']),
    def('container_network_receive_errors_total', 'Cumulative count of errors encountered while receiving', COUNTER, ['interface']),
    def('container_network_transmit_bytes_total', 'Cumulative count of bytes transmitted', COUNTER, ['interface']),
    def('container_network_transmit_packets_total', 'Cumulative count of packets transmitted', COUNTER, ['interface']),
    def('container_network_transmit_packets_dropped_total', 'Cumulative count of packets dropped while transmitting', COUNTER, ['interface']),
    def('container_network_transmit_errors_total', 'Cumulative count of errors encountered while transmitting', COUNTER, ['interface']),
  ].map((d) => [d.descriptor.name, d]),
);

/** ListMetricDescriptors: every metric ListPodSandboxMetrics may send. */
export function metricDescriptors(): MetricDescription[] {
  return [...DEFINITIONS.values()].map((d) => ({ ...d.descriptor, labelKeys: [...d.descriptor.labelKeys] }));
}

const NS_PER_SECOND = 1_000_000_000n;

/** Collects metric samples of one object (`id`, `name` first in every label list). */
class Samples {
  readonly metrics: MetricSample[] = [];
  constructor(
    private readonly base: string[],
    private readonly timestamp: bigint,
  ) {}

  add(name: string, value: bigint | undefined, extra: string[] = []): void {
    const d = DEFINITIONS.get(name)!;
    if (value === undefined || value < 0n) return;
    this.metrics.push({ name, kind: d.kind, timestamp: this.timestamp, labelValues: [...this.base, ...extra], value });
  }

  cgroup(s: CgroupStats | undefined): void {
    if (!s) return;
    if (s.cpu) this.add('container_cpu_usage_seconds_total', s.cpu.usageNs / NS_PER_SECOND);
    if (s.memory) {
      this.add('container_memory_usage_bytes', s.memory.usageBytes);
      this.add('container_memory_working_set_bytes', s.memory.workingSetBytes);
      this.add('container_memory_rss', s.memory.rssBytes);
      // cAdvisor's split: pgfault counts every fault, pgmajfault the major ones.
      this.add('container_memory_failures_total', s.memory.pageFaults, ['pgfault', 'container']);
      this.add('container_memory_failures_total', s.memory.majorPageFaults, ['pgmajfault', 'container']);
    }
    if (s.pids) this.add('container_processes', s.pids.current);
    this.add('container_oom_events_total', s.oomKills);
    for (const kind of ['cpu', 'memory', 'io'] as const) {
      const p = s.pressure?.[kind];
      // PSI totals are µs.
      if (p?.some) this.add(`container_pressure_${kind}_waiting_seconds_total`, p.some.total / 1_000_000n);
      if (p?.full) this.add(`container_pressure_${kind}_stalled_seconds_total`, p.full.total / 1_000_000n);
    }
  }

  network(interfaces: InterfaceStats[]): void {
    for (const i of interfaces) {
      const l = [i.name];
      this.add('container_network_receive_bytes_total', i.rxBytes, l);
      this.add('container_network_receive_packets_total', i.rxPackets, l);
      this.add('container_network_receive_packets_dropped_total', i.rxDropped, l);
      this.add('container_network_receive_errors_total', i.rxErrors, l);
      this.add('container_network_transmit_bytes_total', i.txBytes, l);
      this.add('container_network_transmit_packets_total', i.txPackets, l);
      this.add('container_network_transmit_packets_dropped_total', i.txDropped, l);
      this.add('container_network_transmit_errors_total', i.txErrors, l);
    }
  }
}

export interface MetricsReaderOptions {
  cgroups: CgroupLayout;
  /** The writable layer's usage and the dir whose filesystem is the `device` label. */
  images: Pick<ImageStores, 'rootfsUsage' | 'writableLayerFs'>;
  log: Logger;
}

export class MetricsReader {
  /** The device of each writable layers' dir, read once. */
  private readonly devices = new Map<string, Promise<string>>();

  constructor(private readonly options: MetricsReaderOptions) {}

  /**
   * The metrics of a ready pod: its cgroup totals (pause and live containers) and network interfaces
   * at pod level, each live container's own below it.
   */
  async podMetrics(sandbox: SandboxRecord, containers: ContainerRecord[]): Promise<PodMetricSamples> {
    const live = containers.filter((c) => c.state === 'running');
    const timestamp = nowNs();
    const [pause, interfaces, containerMetrics] = await Promise.all([
      this.cgroupStats(sandbox.cgroupsPath),
      this.interfaces(sandbox),
      Promise.all(live.map((c) => this.containerMetrics(c, timestamp))),
    ]);
    const pod = new Samples([sandbox.id, sandbox.name], timestamp);
    pod.cgroup(sumStats([pause, ...containerMetrics.map((c) => c.stats)]));
    pod.network(interfaces);
    return { podSandboxId: sandbox.id, samples: pod.metrics, containers: containerMetrics.map((c) => c.metrics) };
  }

  private async containerMetrics(r: ContainerRecord, timestamp: bigint): Promise<{ metrics: PodMetricSamples['containers'][number]; stats: CgroupStats | undefined }> {
    const [stats, layer, device] = await Promise.all([this.cgroupStats(r.cgroupsPath), this.options.images.rootfsUsage(r.id), this.fsDevice(this.options.images.writableLayerFs(r.id))]);
    const samples = new Samples([r.id, r.name], timestamp);
    samples.cgroup(stats);
    samples.add('container_spec_memory_limit_bytes', resourcesOf(r)?.memoryLimitInBytes ?? 0n);
    samples.add('container_fs_usage_bytes', layer.bytes, [device]);
    samples.add('container_fs_inodes_total', layer.inodes, [device]);
    return { metrics: { containerId: r.id, samples: samples.metrics }, stats };
  }

  private async cgroupStats(cgroupsPath: string): Promise<CgroupStats | undefined> {
    if (!cgroupsPath) return undefined;
    return readCgroupStats(this.options.cgroups, cgroupsPath).catch(() => undefined);
  }

  /** Every interface of the pod's network namespace but loopback (none for host network). */
  private async interfaces(sandbox: SandboxRecord): Promise<InterfaceStats[]> {
    if (!sandbox.netnsPath || sandbox.pausePid <= 0) return [];
    try {
      return [...(await processNetDev(sandbox.pausePid)).values()].filter((i) => i.name !== 'lo');
    } catch (err) {
      this.options.log.debug('no network metrics for pod', { sandbox: sandbox.id, error: messageOf(err) });
      return [];
    }
  }

  /** The device a writable layers' dir lives on (mountinfo's source). */
  private fsDevice(dir: string): Promise<string> {
    let device = this.devices.get(dir);
    if (!device) {
      device = readMountInfo()
        .then((mounts) => mountContaining(mounts, dir)?.source ?? '')
        .catch(() => '');
      this.devices.set(dir, device);
    }
    return device;
  }
}
