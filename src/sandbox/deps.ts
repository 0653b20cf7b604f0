/**
 * What the sandbox service and its steps (run.ts, recover.ts) need from the rest of Stove, as narrow
 * interfaces: the daemon passes the real services, unit tests pass fakes.
 */
import type { Logger } from '../common/logger.js';
import type { Telemetry } from '../observability/hooks.js';
import type { PodNetworkManager } from '../network/pod-network.js';
import type { SpecSettings } from '../oci/index.js';
import type { SandboxHost } from './host.js';
import type { PauseRuntime } from './pause.js';
import type { PodDefaults } from './pod-config.js';
import type { SandboxStore } from './store.js';
import type { CgroupParentUsers } from './cgroup-parents.js';

/** The network operations a pod needs (PodNetworkManager; faked in unit tests). */
export type PodNetwork = Pick<
  PodNetworkManager,
  'createNetns' | 'pinNetns' | 'removeNetns' | 'listNetns' | 'attachedSandboxes' | 'setup' | 'teardown' | 'status'
>;

export interface SandboxServiceOptions {
  store: SandboxStore;
  /** Per-sandbox volatile dir (paths.sandboxStateDir). */
  sandboxStateDir(id: string): string;
  network: PodNetwork;
  pause: PauseRuntime;
  /** Validates a runtime handler name (throws NotFound for an unknown one) and lists them. */
  runtimes: { get(handler: string): unknown; names(): string[] };
  host: SandboxHost;
  specSettings: SpecSettings;
  /** Absolute path of the pause root filesystem. */
  pauseRootfs: string;
  defaults: PodDefaults;
  /** Who is under the cgroup parent levels pods made (one for the runner and the service): a level goes with the last of them. */
  parentUsers: CgroupParentUsers;
  /** Metrics and trace spans (daemon.ts: the one of observability/start.ts). */
  telemetry: Telemetry;
  log: Logger;
}
