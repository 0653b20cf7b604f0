/** Status: whether the runtime and pod networking are ready; `verbose` adds the config and the quarantine. */
import { RuntimeCondition, StatusResponse, type StatusRequest } from '../gen/runtime/v1/api.js';
import { stringifyJson } from '../common/json.js';
import { redactedConfig } from '../config/load.js';
import type { QuarantineEntry } from '../persist/quarantine.js';
import type { RuntimeInfo } from './runtime-info.js';
import type { CriuSupport } from '../checkpoint/criu.js';
import { PAUSE_IMAGE_NAME } from '../sandbox/pause.js';

/** The Status condition that is false while records are in quarantine. */
const QUARANTINE_CONDITION = 'StoveHasNoRecordsInQuarantine';
/** The Status condition that says whether CheckpointContainer and restores can work on this node. */
const CHECKPOINT_CONDITION = 'StoveCanCheckpointContainers';

export async function status(info: RuntimeInfo, req: StatusRequest): Promise<StatusResponse> {
  const network = await info.deps.networkReadiness();
  const quarantined = info.deps.quarantine?.() ?? [];
  const criu = await info.deps.checkpointSupport?.();
  const verbose: Record<string, string> = {};
  if (req.verbose) {
    // Registry credentials stay out (as AuthConfig's debug_redact fields do everywhere).
    // `sandboxImage` as containerd's `crictl info` has it: kubeadm's preflight reads it to compare with
    // its pause image. Stove's pause is its own root filesystem, never pulled, named as PodSandboxStatus
    // names it.
    verbose.config = stringifyJson({ ...redactedConfig(info.deps.config), podCidr: info.currentPodCidr, sandboxImage: PAUSE_IMAGE_NAME });
    verbose.quarantine = stringifyJson(quarantined);
  }
  return StatusResponse.fromPartial({
    status: {
      conditions: [
        { type: 'RuntimeReady', status: true, reason: '', message: '' },
        { type: 'NetworkReady', status: network.ready, reason: network.reason, message: network.message },
        quarantineCondition(quarantined),
        ...(criu ? [checkpointCondition(criu)] : []),
      ],
    },
    info: verbose,
    runtimeHandlers: info.deps.runtimeHandlers(),
    // The spec module resolves the policy and reports the effective groups in ContainerStatus. A pod
    // with its own user namespace may use the node's network: its pause container joins the node's
    // netns and its containers get /sys bound, not a sysfs of a netns they do not own (oci/mounts.ts).
    features: { supplementalGroupsPolicy: true, userNamespacesHostNetwork: true },
  });
}

/** Informational, as the quarantine's: the kubelet acts on RuntimeReady and NetworkReady only. */
function checkpointCondition(criu: CriuSupport): RuntimeCondition {
  if (criu.ok) return RuntimeCondition.fromPartial({ type: CHECKPOINT_CONDITION, status: true, message: criu.message });
  return RuntimeCondition.fromPartial({ type: CHECKPOINT_CONDITION, status: false, reason: 'CriuUnavailable', message: criu.message });
}

/**
 * Records in quarantine need an operator: a condition of its own (as containerd's
 * `ContainerdHasNoDeprecationWarnings`), which the kubelet does not act on, so the node stays Ready
 * and `crictl info` shows what to repair.
 */
function quarantineCondition(entries: QuarantineEntry[]): RuntimeCondition {
  if (entries.length === 0) return RuntimeCondition.fromPartial({ type: QUARANTINE_CONDITION, status: true });
  const named = entries.slice(0, 5).map((e) => `${e.kind} ${e.id}`).join(', ') + (entries.length > 5 ? `, and ${entries.length - 5} more` : '');
  return RuntimeCondition.fromPartial({
    type: QUARANTINE_CONDITION,
    status: false,
    reason: 'RecordsInQuarantine',
    message: `${entries.length} unreadable record(s) in quarantine (${named}): what they describe is left alone and image garbage collection keeps what they may reference; see stove check`,
  });
}
