/** PodSandboxStatus, ListPodSandbox and StreamPodSandboxes. */
import {
  ListPodSandboxResponse,
  PodSandboxStatusResponse,
  PodSandbox,
  StreamPodSandboxesResponse,
  type ListPodSandboxRequest,
  type PodSandboxFilter,
  type PodSandboxStatusRequest,
  type StreamPodSandboxesRequest,
} from '../gen/runtime/v1/api.js';
import type { StreamSink } from '../api/handlers.js';
import { writeChunked } from '../api/stream-chunks.js';
import { encodeAsParts, responsePerKey } from '../api/wire-reuse.js';
import { requiredString } from './validate.js';
import { nowNs } from '../common/clock.js';
import { podConfigOf, type PauseState, type SandboxRecord } from '../sandbox/model.js';
import { criPodState, toPodSandboxStatus } from './sandbox-convert.js';
import { toContainerStatus } from './container-convert.js';
import type { ContainerRecord } from '../container/model.js';
import type { PodLifecycle } from '../pod/lifecycle.js';
import type { SandboxService } from '../sandbox/service.js';

/** The sandbox service's reads: the query RPCs change no pod. */
type SandboxReads = Pick<SandboxService, 'get' | 'find' | 'list' | 'configOf' | 'pauseState' | 'pauseSpec' | 'networkStatus'>;

/** The status part of a PodSandboxStatus answer, one per record object. */
const statusPart = responsePerKey((record: SandboxRecord) => PodSandboxStatusResponse.fromPartial({ status: toPodSandboxStatus(record) }));

/**
 * NOT_FOUND for an unknown pod; `verbose` adds `info["info"]`, a JSON document like containerd's. The
 * answer carries a timestamp and, with it, the statuses of all the pod's containers: a kubelet with the
 * EventedPLEG gate takes a timestamped answer's containers_statuses as the pod's containers (and would
 * start the pod's containers again, and again, from an answer without them).
 */
export async function podSandboxStatus(
  d: { pods: Pick<PodLifecycle, 'status'>; sandboxes: SandboxReads; containersOf: (sandboxId: string) => readonly ContainerRecord[] },
  req: PodSandboxStatusRequest,
): Promise<PodSandboxStatusResponse> {
  const { record, pause } = await d.pods.status(requiredString(req.podSandboxId, 'pod_sandbox_id'));
  const info: Record<string, string> = {};
  if (req.verbose) info.info = JSON.stringify(await verboseInfo(d.sandboxes, record, pause));
  // The status is encoded once per record; the containers, timestamp (and info) of each call follow it.
  const brief = statusPart(record);
  const fresh = PodSandboxStatusResponse.fromPartial({ info, timestamp: nowNs(), containersStatuses: d.containersOf(record.id).map(toContainerStatus) });
  return encodeAsParts({ ...fresh, status: brief.status }, [brief, fresh]);
}

/** `pause`: the state of the pause process if the status call checked it already. */
async function verboseInfo(sandboxes: SandboxReads, record: SandboxRecord, pause: PauseState | undefined): Promise<Record<string, unknown>> {
  const [processStatus, runtimeSpec, network] = await Promise.all([
    pause ?? sandboxes.pauseState(record),
    sandboxes.pauseSpec(record),
    sandboxes.networkStatus(record.id),
  ]);
  return {
    pid: record.pausePid,
    processStatus,
    conmonPid: record.conmonPid,
    netNamespaceClosed: !network,
    netnsPath: record.netnsPath,
    namespaces: record.namespaces,
    image: 'stove/pause',
    runtimeHandler: record.runtimeHandler || 'runc',
    hostname: record.hostname,
    cgroupParent: record.cgroupParent,
    cgroupsPath: record.cgroupsPath,
    podFiles: record.files,
    ...(record.resize ? { resize: record.resize } : {}),
    ...(record.exit ? { exitCode: record.exit.code, finishedAt: record.exit.finishedAt.toString() } : {}),
    config: record.config,
    runtimeSpec,
    cniResult: network?.result,
  };
}

/** Filters: `id` (full ID or unique prefix), `state`, and a label selector (every pair must match). */
export async function listPodSandbox(sandboxes: SandboxReads, req: ListPodSandboxRequest): Promise<ListPodSandboxResponse> {
  const parts = selectPodSandboxes(sandboxes, req.filter).map((record) => listPart(record));
  return encodeAsParts({ items: parts.map((p) => p.items[0]!) }, parts);
}

/** What ListPodSandbox returns, in bounded chunks. */
export async function streamPodSandboxes(
  sandboxes: SandboxReads,
  req: StreamPodSandboxesRequest,
  sink: StreamSink<StreamPodSandboxesResponse>,
): Promise<void> {
  const items = selectPodSandboxes(sandboxes, req.filter).map((record) => listPart(record).items[0]!);
  await writeChunked(sink, [items], (p) => PodSandbox.encode(p).finish().length, (podSandboxes) => StreamPodSandboxesResponse.fromPartial({ podSandboxes }));
}

/** The ListPodSandbox entry of a record as a one-entry response, concatenated into the full list. */
const listPart = responsePerKey((record: SandboxRecord): ListPodSandboxResponse => {
  const config = podConfigOf(record);
  return {
    items: [
      {
        id: record.id,
        metadata: config.metadata,
        state: criPodState(record),
        createdAt: record.createdAt,
        labels: config.labels,
        annotations: config.annotations,
        runtimeHandler: record.runtimeHandler,
      },
    ],
  };
});

function selectPodSandboxes(sandboxes: SandboxReads, filter: PodSandboxFilter | undefined): SandboxRecord[] {
  let records = filter?.id ? [sandboxes.find(filter.id)].filter((r): r is SandboxRecord => r !== undefined) : sandboxes.list();
  if (filter?.state) records = records.filter((r) => criPodState(r) === filter.state!.state);
  const selector = Object.entries(filter?.labelSelector ?? {});
  if (selector.length) {
    records = records.filter((r) => {
      const labels = sandboxes.configOf(r).labels;
      return selector.every(([k, v]) => labels[k] === v);
    });
  }
  return records.sort((a, b) => (a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : 0));
}
