/**
 * RunPodSandbox as a list of steps. Each step starts as soon as what it needs exists, and pushes its
 * undo right after it acquires something, so a failed run leaves nothing behind:
 *
 *   validate (config, handler, whole pause spec) → reserve name → state dir, log dir
 *   ├─ netns pin ──────────┬─ CNI ADD ───────────────────┐
 *   ├─ pod files + shm ────┤                             ├─ record written → READY
 *   └─ cgroup parent check ┴─ pause create + start ──────┘
 *
 * The pause container joins the pinned netns by path, so it does not wait for CNI, unless a sysctl
 * names a pod interface (`net.ipv4.conf.eth0.*`), which must exist before runc writes it.
 *
 * A pod with its own user namespace on the pod network goes the other way round (podOwnedNetnsSteps):
 *
 *   pod files + shm, cgroup parent check → pause create (runc makes the netns) → pin its netns
 *   → CNI ADD (→ sysctls naming the pod interface, written from the host) ∥ pause start
 */
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { PodSandboxConfig } from '../gen/runtime/v1/api.js';
import { withCleanup, type CleanupStack } from '../common/cleanup.js';
import { nowNs } from '../common/clock.js';
import { wrap } from '../common/errors.js';
import { newId, shortId } from '../common/ids.js';
import { settleAll } from '../common/settle.js';
import { buildPauseSpec, preparePauseHost, type Spec } from '../oci/index.js';
import { podRootGid, type SandboxNamespaces, type SandboxRecord } from './model.js';
import { makePodDir } from '../persist/tree-modes.js';
import { PAUSE_IMAGE_NAME, pauseRefs, type PauseProcess } from './pause.js';
import { planPod, type PodPlan } from './pod-config.js';
import { podFilePaths, type PodFiles } from './pod-files.js';
import type { SandboxServiceOptions } from './deps.js';
import { StepTimer } from '../observability/steps.js';

/** Stands in for the netns path while the spec is validated, before the namespace exists. */
const NETNS_PENDING = '/proc/self/ns/net';

/** RunPodSandbox, which the pod coordinator calls (no lock: the pod has no ID before it). */
export class SandboxRunner {
  constructor(private readonly options: SandboxServiceOptions) {}

  /** Creates and starts a pod sandbox; on failure nothing it made is left. */
  async run(config: PodSandboxConfig, runtimeHandler: string): Promise<SandboxRecord> {
    const { options } = this;
    options.runtimes.get(runtimeHandler);
    const plan = planPod(config, options.defaults);
    const { seccompProfiles } = await preparePauseHost(config);
    const id = newId();
    const stateDir = options.sandboxStateDir(id);
    const files = podFilePaths(stateDir, plan.modes.hostIpc);
    // The whole spec is built (and so validated) before anything exists; the netns path comes later.
    const spec = buildPauseSpec({
      sandboxId: id,
      config,
      rootPath: options.pauseRootfs,
      hostname: plan.hostname,
      // Absent, the pause container gets a new netns of its own (pods with a user namespace).
      netnsPath: plan.modes.hostNetwork || ownsNetns(plan) ? undefined : NETNS_PENDING,
      shmPath: files.shmPath,
      cgroupParent: plan.cgroupParent,
      imageName: PAUSE_IMAGE_NAME,
      seccompProfiles,
      settings: options.specSettings,
    });
    const log = options.log.child({ sandbox: shortId(id), pod: plan.name });
    const timer = new StepTimer(options.telemetry);
    // Until the record is stored, this run keeps the levels above its cgroup from being removed.
    const release = options.parentUsers.claim(plan.cgroupParent);
    const record = await withCleanup(log, (cleanup) =>
      new PodRun(options, { id, config, runtimeHandler, plan, spec, files, stateDir }, cleanup, timer).run(),
    ).finally(release);
    const ms = timer.total();
    options.telemetry.metrics.podSandboxStarted(ms / 1000, timer.steps);
    log.info('pod sandbox ready', { id, ips: record.ips, pausePid: record.pausePid, ms, steps: timer.steps });
    return record;
  }
}

/** What a run is about, fixed before it starts. */
interface PodRunInput {
  id: string;
  config: PodSandboxConfig;
  runtimeHandler: string;
  plan: PodPlan;
  spec: Spec;
  files: PodFiles;
  stateDir: string;
}

/** One RunPodSandbox: its steps share the input, the cleanup stack and the step timer. */
class PodRun {
  private readonly id: string;

  constructor(
    private readonly options: SandboxServiceOptions,
    private readonly input: PodRunInput,
    private readonly cleanup: CleanupStack,
    private readonly timer: StepTimer,
  ) {
    this.id = input.id;
  }

  async run(): Promise<SandboxRecord> {
    const { id, plan, spec, stateDir, files, config, runtimeHandler } = this.input;
    const { store } = this.options;
    store.names.reserve(plan.name, id, 'sandbox');
    this.cleanup.push('release sandbox name', () => store.names.release(plan.name, id));
    await makePodDir(stateDir, plan.modes.userns ? podRootGid(usernsOf(plan)) : undefined);
    this.cleanup.push('remove sandbox state dir', () => rm(stateDir, { recursive: true, force: true }));
    await this.createLogDirectory();
    if (plan.modes.userns)
      await this.options.host.assertSearchableByOthers(
        join(this.options.pauseRootfs, 'bin'),
        `sandbox "${id}" has its own user namespace, whose root cannot reach the pause root filesystem`,
      );

    const t = this.timer;
    const podFiles = t.time('podFiles', () => this.setupPodFiles());
    const cgroups = t.time('cgroupParent', () => this.prepareCgroups());
    const hostReady = Promise.all([podFiles, cgroups]);
    const { netns, network, pause } = ownsNetns(plan) ? this.podOwnedNetnsSteps(hostReady) : this.pinnedNetnsSteps(hostReady);
    const [netnsPath, , createdCgroups, ips, proc] = await settleAll([netns, podFiles, cgroups, network, pause] as const);

    const record: SandboxRecord = {
      id,
      name: plan.name,
      config: PodSandboxConfig.toJSON(config),
      runtimeHandler,
      createdAt: nowNs(),
      state: 'ready',
      hostname: plan.hostname,
      netnsPath,
      ips,
      cgroupParent: plan.cgroupParent,
      cgroupsPath: spec.linux?.cgroupsPath ?? '',
      createdCgroupParents: createdCgroups,
      pausePid: proc.pid,
      pauseStartTime: proc.pidStartTime,
      conmonPid: proc.conmonPid,
      conmonStartTime: proc.conmonStartTime,
      namespaces: namespacePaths(proc.pid, netnsPath, plan),
      files,
      stateDir,
      bundleDir: this.bundleDir,
      ...(plan.modes.userns ? { userns: usernsOf(plan) } : {}),
    };
    await t.time('record', () => store.put(record));
    return record;
  }

  /**
   * Pin a new netns, attach it with CNI and let the pause container join it by path. The pause does
   * not wait for CNI unless a sysctl names the pod interface, which runc can only write once it exists.
   */
  private pinnedNetnsSteps(hostReady: Promise<unknown>): NetworkSteps {
    const { spec } = this.input;
    const t = this.timer;
    const netns = t.time('netns', () => this.createNetns());
    const network = netns.then((netnsPath) => t.time('cni', () => this.setupNetwork(netnsPath)));
    const ready = Promise.all([netns, hostReady, needsInterface(spec) ? network : undefined]).then(([netnsPath]) => {
      if (netnsPath) setNetnsPath(spec, netnsPath);
    });
    ready.catch(() => {}); // its failure is the failed step's, which settleAll reports
    // conmon starts at once and sets itself up meanwhile; runc creates the pause container once `ready`.
    const pause = this.createPause(ready).then(async (proc) => {
      await this.startPause();
      return proc;
    });
    return { netns, network, pause };
  }

  /**
   * A pod with its own user namespace (containerd 2's order for such pods). Its containers join the
   * pod's user namespace first and the other namespaces after; the kernel lets a process setns into
   * a namespace only with CAP_SYS_ADMIN in the user namespace that owns it, so a netns pinned by the
   * host (owned by the host's user namespace) is out of their reach ("setns into net namespace:
   * Operation not permitted"). So the pause container is created first with a new netns, which runc
   * makes inside the pod's user namespace; Stove pins `/proc/<pause pid>/ns/net` and runs CNI on the
   * pin, while the pause process starts. The pod's other net.* sysctls are written by runc in that
   * netns as usual; those naming the pod interface need CNI first and are written from the host (whose
   * root is privileged over every user namespace) once the interface exists. Idmapped mounts change
   * nothing here (they concern the root filesystem, see container/create.ts): the order is the same with
   * any runtime.
   */
  private podOwnedNetnsSteps(hostReady: Promise<unknown>): NetworkSteps {
    const t = this.timer;
    const interfaceSysctls = this.takeInterfaceSysctls();
    const created = hostReady.then(() => this.createPause());
    const netns = created.then((proc) => t.time('netns', () => this.pinNetns(proc.pid)));
    const network = netns.then(async (netnsPath) => {
      const ips = await t.time('cni', () => this.setupNetwork(netnsPath));
      if (interfaceSysctls) await t.time('netnsSysctls', () => this.writeNetnsSysctls(netnsPath, interfaceSysctls));
      return ips;
    });
    const pause = netns.then(async () => {
      await this.startPause();
      return created;
    });
    return { netns, network, pause };
  }

  /** Removes the sysctls naming a pod interface from the pause spec and returns them (if any). */
  private takeInterfaceSysctls(): Record<string, string> | undefined {
    const { spec } = this.input;
    const sysctl = spec.linux?.sysctl;
    if (!sysctl) return undefined;
    const taken = Object.fromEntries(Object.entries(sysctl).filter(([k]) => namesPodInterface(k)));
    if (Object.keys(taken).length === 0) return undefined;
    for (const k of Object.keys(taken)) delete sysctl[k];
    if (Object.keys(sysctl).length === 0) delete spec.linux!.sysctl;
    return taken;
  }

  private async writeNetnsSysctls(netnsPath: string, sysctls: Record<string, string>): Promise<void> {
    try {
      await this.options.host.writeNetnsSysctls(netnsPath, sysctls);
    } catch (err) {
      throw wrap(err, `failed to set the network sysctls of sandbox "${this.id}"`);
    }
  }

  private get bundleDir(): string {
    return join(this.input.stateDir, 'bundle');
  }

  private async createLogDirectory(): Promise<void> {
    const dir = this.input.config.logDirectory;
    if (!dir) return;
    const first = await mkdir(dir, { recursive: true, mode: 0o755 });
    if (first) this.cleanup.push('remove log directory', () => rm(first, { recursive: true, force: true }));
  }

  /** Pins a new network namespace ('' for host network). */
  private async createNetns(): Promise<string> {
    if (this.input.plan.modes.hostNetwork) return '';
    let path: string;
    try {
      path = await this.options.network.createNetns(this.id);
    } catch (err) {
      throw wrap(err, `failed to create network namespace for sandbox "${this.id}"`);
    }
    this.cleanup.push('remove network namespace', () => this.options.network.removeNetns(path));
    return path;
  }

  /** Pins the network namespace the (created) pause process made. */
  private async pinNetns(pausePid: number): Promise<string> {
    let path: string;
    try {
      path = await this.options.network.pinNetns(this.id, `/proc/${pausePid}/ns/net`);
    } catch (err) {
      throw wrap(err, `failed to pin the network namespace of sandbox "${this.id}"`);
    }
    this.cleanup.push('remove network namespace', () => this.options.network.removeNetns(path));
    return path;
  }

  private async setupPodFiles(): Promise<void> {
    const { files, plan, config } = this.input;
    this.cleanup.push('remove pod files', () => this.options.host.removePodFiles(files));
    try {
      await settleAll([this.options.host.writePodFiles(files, plan.hostname, config.dnsConfig), this.options.host.mountShm(files)]);
    } catch (err) {
      throw wrap(err, `failed to setup sandbox files for sandbox "${this.id}"`);
    }
  }

  /** Registers the removal of the pause cgroup and of parent levels this pod brings into being. */
  private async prepareCgroups(): Promise<string[]> {
    const missing = await this.options.host.missingCgroupLevels(this.input.plan.cgroupParent);
    this.cleanup.push('remove cgroup parents', async () => {
      const parent = this.input.plan.cgroupParent;
      for (const level of this.options.parentUsers.removable(parent, missing, { claimedParent: parent })) await this.options.host.removeEmptyCgroup(level);
    });
    const cgroupsPath = this.input.spec.linux?.cgroupsPath;
    if (cgroupsPath) this.cleanup.push('remove pause cgroup', () => this.options.host.removeCgroup(cgroupsPath));
    return missing;
  }

  /** CNI ADD into the pinned namespace; the pod IPs, primary first (none for host network). */
  private async setupNetwork(netnsPath: string): Promise<string[]> {
    const { plan, config } = this.input;
    if (plan.modes.hostNetwork) return [];
    const meta = config.metadata!;
    // The manager undoes a failed ADD itself; a later failure needs the DEL registered here.
    const result = await this.options.network.setup({
      sandboxId: this.id,
      netnsPath,
      podName: meta.name,
      podNamespace: meta.namespace,
      podUid: meta.uid,
      portMappings: plan.portMappings,
      annotations: config.annotations,
      dnsConfig: config.dnsConfig,
      cgroupParent: plan.cgroupParent,
    });
    this.cleanup.push('tear down pod network', () => this.options.network.teardown({ sandboxId: this.id, netnsPath }));
    return result.ips;
  }

  /**
   * Creates the pause container (runtime state `created`: its namespaces exist, /bin/pause does not run
   * yet), once `ready` resolves. If `ready` rejects, its error is the run's (nothing was created).
   */
  private async createPause(ready?: Promise<unknown>): Promise<PauseProcess> {
    const { id } = this;
    const { runtimeHandler: handler, spec } = this.input;
    let proc: PauseProcess;
    try {
      proc = await this.timer.time('pauseCreate', () => this.options.pause.create(id, handler, this.bundleDir, spec, ready));
    } catch (err) {
      if (ready && (await ready.then(() => false, () => true))) throw err;
      throw wrap(err, `failed to create pause container for sandbox "${id}"`);
    }
    this.cleanup.push('destroy pause container', async () => {
      await this.options.pause.destroy(id, handler, pauseRefs(proc.pid, proc.pidStartTime, proc.conmonPid, proc.conmonStartTime));
      await this.options.pause.forget(id);
    });
    return proc;
  }

  private async startPause(): Promise<void> {
    const { id } = this;
    try {
      await this.timer.time('pauseStart', () => this.options.pause.start(id, this.input.runtimeHandler));
    } catch (err) {
      throw wrap(err, `failed to start pause container for sandbox "${id}"`);
    }
  }
}

/** The netns, CNI and pause steps of a run (their order depends on who makes the netns). */
interface NetworkSteps {
  /** The pinned netns ('' for host network). */
  netns: Promise<string>;
  /** The pod IPs. */
  network: Promise<string[]>;
  pause: Promise<PauseProcess>;
}

/** True when the pause container makes the pod's netns (pods with their own user namespace). */
function ownsNetns(plan: PodPlan): boolean {
  return plan.modes.userns && !plan.modes.hostNetwork;
}

/** Sysctls of a named pod interface need the interface, so CNI runs first. */
function needsInterface(spec: Spec): boolean {
  return Object.keys(spec.linux?.sysctl ?? {}).some(namesPodInterface);
}

/** `net.ipv4.conf.eth0.rp_filter` names an interface CNI makes; `…conf.all.…`, `default`, `lo` do not. */
function namesPodInterface(sysctl: string): boolean {
  const m = /^net\.ipv[46]\.(?:conf|neigh)\.([^.]+)\./.exec(sysctl);
  return m !== null && !['all', 'default', 'lo'].includes(m[1]!);
}

/** Replaces the placeholder network namespace path in a pause spec. */
function setNetnsPath(spec: Spec, path: string): void {
  const ns = spec.linux?.namespaces?.find((n) => n.type === 'network');
  if (ns) ns.path = path;
}

/** Where the pod's containers join its namespaces. */
function namespacePaths(pausePid: number, netnsPath: string, plan: PodPlan): SandboxNamespaces {
  const proc = (kind: string) => `/proc/${pausePid}/ns/${kind}`;
  const out: SandboxNamespaces = {};
  if (!plan.modes.hostNetwork) {
    out.network = netnsPath;
    out.uts = proc('uts');
  }
  if (!plan.modes.hostIpc) out.ipc = proc('ipc');
  if (!plan.modes.hostPid) out.pid = proc('pid');
  if (plan.modes.userns) out.user = proc('user');
  return out;
}

function usernsOf(plan: PodPlan): NonNullable<SandboxRecord['userns']> {
  const map = (m: { containerID: number; hostID: number; size: number }) => ({ containerId: m.containerID, hostId: m.hostID, size: m.size });
  return { uidMappings: plan.modes.uidMappings.map(map), gidMappings: plan.modes.gidMappings.map(map) };
}
