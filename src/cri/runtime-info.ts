/** Version, Status, RuntimeConfig and UpdateRuntimeConfig: what the runtime is and whether it is ready. */
import {
  CgroupDriver,
  RuntimeCondition,
  RuntimeConfigResponse,
  StatusResponse,
  UpdateRuntimeConfigResponse,
  VersionResponse,
  type RuntimeHandler,
  type StatusRequest,
  type UpdateRuntimeConfigRequest,
  type VersionRequest,
} from '../gen/runtime/v1/api.js';
import type { Config } from '../config/schema.js';
import type { Logger } from '../common/logger.js';
import { stringifyJson } from '../common/json.js';
import type { RuntimeHandlerSet } from '../runtime/handlers.js';
import type { QuarantineEntry } from '../persist/quarantine.js';
import { redactedConfig } from '../config/load.js';

export const RUNTIME_NAME = 'stove';
export const RUNTIME_API_VERSION = 'v1';
/** The Status condition that is false while records are in quarantine. */
const QUARANTINE_CONDITION = 'StoveHasNoRecordsInQuarantine';

/** Whether pod networking can work right now, and why not. */
export interface NetworkReadiness {
  ready: boolean;
  reason: string;
  message: string;
}

export interface RuntimeInfoDeps {
  config: Config;
  version: string;
  log: Logger;
  /** Checks the CNI configuration (cheap: called on every Status). */
  networkReadiness(): Promise<NetworkReadiness>;
  /** The runtime handlers and their features, for Status. */
  runtimeHandlers(): RuntimeHandler[];
  /** Records in quarantine (verbose Status shows them: what they describe needs an operator). */
  quarantine?(): QuarantineEntry[];
  /** Tells the network module the pod CIDR the kubelet pushed. */
  setPodCidr?(cidr: string): void;
}

export class RuntimeInfo {
  private podCidr = '';

  constructor(private readonly deps: RuntimeInfoDeps) {}

  /** The pod CIDR last pushed by UpdateRuntimeConfig ('' before any). */
  get currentPodCidr(): string {
    return this.podCidr;
  }

  async version(_req: VersionRequest): Promise<VersionResponse> {
    return VersionResponse.fromPartial({
      version: '0.1.0',
      runtimeName: RUNTIME_NAME,
      runtimeVersion: this.deps.version,
      runtimeApiVersion: RUNTIME_API_VERSION,
    });
  }

  async status(req: StatusRequest): Promise<StatusResponse> {
    const network = await this.deps.networkReadiness();
    const info: Record<string, string> = {};
    if (req.verbose) {
      // Registry credentials stay out (as AuthConfig's debug_redact fields do everywhere).
      info.config = stringifyJson({ ...redactedConfig(this.deps.config), podCidr: this.podCidr });
      info.quarantine = stringifyJson(this.deps.quarantine?.() ?? []);
    }
    return StatusResponse.fromPartial({
      status: {
        conditions: [
          { type: 'RuntimeReady', status: true, reason: '', message: '' },
          { type: 'NetworkReady', status: network.ready, reason: network.reason, message: network.message },
          this.quarantineCondition(),
        ],
      },
      info,
      runtimeHandlers: this.deps.runtimeHandlers(),
      // The spec module resolves the policy and reports the effective groups in ContainerStatus. A pod
      // with its own user namespace may use the node's network: its pause container joins the node's
      // netns and its containers get /sys bound, not a sysfs of a netns they do not own (oci/mounts.ts).
      features: { supplementalGroupsPolicy: true, userNamespacesHostNetwork: true },
    });
  }

  /**
   * Records in quarantine need an operator: a condition of its own (as containerd's
   * `ContainerdHasNoDeprecationWarnings`), which the kubelet does not act on, so the node stays Ready
   * and `crictl info` shows what to repair.
   */
  private quarantineCondition(): RuntimeCondition {
    const entries = this.deps.quarantine?.() ?? [];
    if (entries.length === 0) return RuntimeCondition.fromPartial({ type: QUARANTINE_CONDITION, status: true });
    const named = entries.slice(0, 5).map((e) => `${e.kind} ${e.id}`).join(', ') + (entries.length > 5 ? `, and ${entries.length - 5} more` : '');
    return RuntimeCondition.fromPartial({
      type: QUARANTINE_CONDITION,
      status: false,
      reason: 'RecordsInQuarantine',
      message: `${entries.length} unreadable record(s) in quarantine (${named}): what they describe is left alone and image garbage collection keeps what they may reference; see stove check`,
    });
  }

  async runtimeConfig(): Promise<RuntimeConfigResponse> {
    const driver = this.deps.config.runtime.cgroupDriver === 'systemd' ? CgroupDriver.SYSTEMD : CgroupDriver.CGROUPFS;
    return RuntimeConfigResponse.fromPartial({ linux: { cgroupDriver: driver } });
  }

  async updateRuntimeConfig(req: UpdateRuntimeConfigRequest): Promise<UpdateRuntimeConfigResponse> {
    const cidr = req.runtimeConfig?.networkConfig?.podCidr ?? '';
    if (cidr && cidr !== this.podCidr) {
      this.deps.log.info('pod CIDR updated', { podCidr: cidr });
      this.podCidr = cidr;
      this.deps.setPodCidr?.(cidr);
    }
    return UpdateRuntimeConfigResponse.fromPartial({});
  }
}

/**
 * The runtime handlers Status advertises, the default ('') first, with what each supports. The kubelet
 * refuses user-namespaced pods and recursive read-only mounts on a handler that does not claim them.
 * User namespaces work with runc 1.1 without idmapped mounts: the sandbox module gives the pod's mapped
 * root access to its files, so every handler Stove runs claims them.
 */
export async function describeRuntimeHandlers(runtimes: RuntimeHandlerSet): Promise<RuntimeHandler[]> {
  const described: RuntimeHandler[] = [];
  for (const name of runtimes.names()) {
    const features = await runtimes.get(name).features().catch(() => undefined);
    const handlerFeatures = {
      recursiveReadOnlyMounts: features?.mountOptions?.includes('rro') ?? false,
      userNamespaces: true,
    };
    if (described.length === 0) described.push({ name: '', features: handlerFeatures });
    described.push({ name, features: handlerFeatures });
  }
  return described;
}
