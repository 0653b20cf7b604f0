/**
 * What Version, Status, RuntimeConfig and UpdateRuntimeConfig read: the runtime's facts, and the pod
 * CIDR the kubelet pushed last (the one piece of state they share).
 */
import type { RuntimeHandler } from '../gen/runtime/v1/api.js';
import type { Config } from '../config/schema.js';
import type { Logger } from '../common/logger.js';
import type { RuntimeHandlerSet } from '../runtime/handlers.js';
import type { QuarantineEntry } from '../persist/quarantine.js';
import type { CriuSupport } from '../checkpoint/criu.js';

export const RUNTIME_NAME = 'stove';
export const RUNTIME_API_VERSION = 'v1';

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
  /** Whether CRIU works here, for checkpoints and restores (cached by the probe). */
  checkpointSupport?(): Promise<CriuSupport>;
  /** Tells the network module the pod CIDR the kubelet pushed. */
  setPodCidr?(cidr: string): void;
}

export class RuntimeInfo {
  private podCidr = '';

  constructor(readonly deps: RuntimeInfoDeps) {}

  /** The pod CIDR last pushed by UpdateRuntimeConfig ('' before any). */
  get currentPodCidr(): string {
    return this.podCidr;
  }

  /** Records a pod CIDR the kubelet pushed; false when it is the one in force already. */
  setPodCidr(cidr: string): boolean {
    if (cidr === this.podCidr) return false;
    this.podCidr = cidr;
    this.deps.setPodCidr?.(cidr);
    return true;
  }
}

/**
 * The runtime handlers Status advertises, the default ('') first, with what each supports. The kubelet
 * refuses user-namespaced pods and recursive read-only mounts on a handler that does not claim them.
 * User namespaces work with every runtime: with idmapped mounts (`mountExtensions.idmap` in its
 * features) the image layers are idmapped, without them (runc 1.1, crun 1.8) the root filesystem is
 * chowned into the pod's range and the sandbox module gives the mapped root access to its files, so
 * every handler Stove runs claims them.
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
