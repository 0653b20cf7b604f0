/**
 * Pod networking for the sandbox module, which never sees CNI: pinned network namespaces plus the
 * runtime side of CNI (libcni's AddNetworkList / DelNetworkList / CheckNetworkList semantics, its
 * error texts, and an on-disk attachment cache).
 *
 * Caller pattern (RunPodSandbox): `createNetns` → `setup` → start pause joining the netns path; on a
 * later failure `teardown` then `removeNetns`. A pod with its own user namespace instead creates the
 * pause container (which makes the netns) → `pinNetns(id, /proc/<pid>/ns/net)` → `setup`.
 * A failed `setup` has already undone its own ADDs.
 * StopPodSandbox: `teardown` (before removing the netns: some plugins, e.g. bridge 1.1's ipMasq,
 * clean up only while the pod interface still exists), then `removeNetns`.
 */
import { alreadyExists, failedPrecondition, invalidArgument, messageOf, notFound, wrap } from '../common/errors.js';
import { KeyedMutex } from '../common/locks.js';
import type { Logger } from '../common/logger.js';
import { buildCapabilityArgs, buildCniArgs, formatCniArgs, type PodNetworkArgs } from './cni-args.js';
import { CACHE_KIND, CniCache, type CniCacheEntry } from './cni-cache.js';
import { CniConfigSource } from './cni-config.js';
import { CniExec } from './cni-exec.js';
import { CniListRunner, pluginDescription, type AddProgress, type ListCall } from './cni-list.js';
import { convertResult, podIps, versionAtLeast, type CniResult } from './cni-result.js';
import { isNetns, NetnsStore } from './netns.js';

export interface PodNetworkOptions {
  cniConfDir: string;
  cniBinDirs: string[];
  cniTimeoutSeconds: number;
  /** Where pinned namespaces live (paths.netnsDir). */
  netnsDir: string;
  /** Where attachment records live; persistent (see cni-cache.ts). */
  cacheDir: string;
  log: Logger;
}

/** A pod to attach: identity, netns and the per-pod CNI inputs. */
export interface PodNetworkRequest extends PodNetworkArgs {
  netnsPath: string;
}

/** Teardown and check need only these: everything else comes from what ADD recorded. */
export type PodNetworkRef = Pick<PodNetworkRequest, 'sandboxId' | 'netnsPath'> & Partial<PodNetworkRequest>;

/** What the pod got, for PodSandboxStatus. */
export interface PodNetworkResult {
  networkName: string;
  /** The pod interface, always eth0. */
  interface: string;
  /** Every pod IP on the interface, primary first. */
  ips: string[];
  /** PodSandboxStatus.network.ip ('' when the plugins returned no IP). */
  primaryIp: string;
  /** PodSandboxStatus.network.additional_ips. */
  additionalIps: string[];
  /** The final CNI result, in the network's cniVersion. */
  result: CniResult;
}

/** The NetworkReady condition. */
export interface PodNetworkReadiness {
  ready: boolean;
  reason: string;
  message: string;
}

const IF_NAME = 'eth0';
/** Sandbox IDs name cache files. */
const SANDBOX_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

function checkSandboxId(id: string): void {
  if (!SANDBOX_ID.test(id)) throw invalidArgument(`invalid sandbox ID ${JSON.stringify(id)}`);
}

/** What PodSandboxStatus needs from a CNI result. */
export function toPodNetworkResult(networkName: string, result: CniResult): PodNetworkResult {
  const ips = podIps(result, IF_NAME);
  return { networkName, interface: IF_NAME, ips, primaryIp: ips[0] ?? '', additionalIps: ips.slice(1), result };
}

export class PodNetworkManager {
  private readonly config: CniConfigSource;
  private readonly exec: CniExec;
  private readonly lists: CniListRunner;
  private readonly cache: CniCache;
  private readonly netns: NetnsStore;
  private readonly locks = new KeyedMutex();
  private readonly log: Logger;

  constructor(options: PodNetworkOptions) {
    this.log = options.log;
    this.config = new CniConfigSource(options.cniConfDir);
    this.exec = new CniExec({ binDirs: options.cniBinDirs, timeoutSeconds: options.cniTimeoutSeconds, log: options.log });
    this.lists = new CniListRunner(this.exec, options.log);
    this.cache = new CniCache(options.cacheDir);
    this.netns = new NetnsStore(options.netnsDir);
  }

  /** Creates and pins a network namespace for the sandbox (lo up); returns its path. */
  createNetns(sandboxId: string): Promise<string> {
    return this.netns.create(sandboxId);
  }

  /**
   * Pins the network namespace at `source` (e.g. `/proc/<pid>/ns/net`) as the sandbox's; returns the
   * pin path. For a pod whose pause process made its own netns (pods with a user namespace).
   */
  pinNetns(sandboxId: string, source: string): Promise<string> {
    return this.netns.pin(sandboxId, source);
  }

  /** Unpins and deletes a namespace file; missing is fine. */
  removeNetns(path: string): Promise<void> {
    return this.netns.remove(path);
  }

  /** Every pinned namespace file (for garbage collection after a restart). */
  listNetns(): Promise<string[]> {
    return this.netns.list();
  }

  /** Sandbox IDs with a network attachment that was not torn down (for garbage collection). */
  attachedSandboxes(): Promise<string[]> {
    return this.cache.containerIds();
  }

  /** Reads the CNI conf dir again on the next use (a config reload). */
  rescanConfig(): void {
    this.config.rescan();
  }

  /** NetworkReady: false with NetworkPluginNotReady while the conf dir has no usable network. Cheap. */
  async readiness(): Promise<PodNetworkReadiness> {
    const lookup = await this.config.current();
    if (lookup.network) return { ready: true, reason: '', message: '' };
    return { ready: false, reason: 'NetworkPluginNotReady', message: lookup.reason };
  }

  /** CNI ADD of the current default network into `req.netnsPath`. On failure nothing stays allocated. */
  setup(req: PodNetworkRequest): Promise<PodNetworkResult> {
    return this.locks.run(req.sandboxId, async () => {
      try {
        return await this.add(req);
      } catch (err) {
        throw wrap(err, `failed to setup network for sandbox ${JSON.stringify(req.sandboxId)}`);
      }
    });
  }

  /** CNI DEL with what ADD used and returned. Idempotent; works when the netns is already gone. */
  teardown(ref: PodNetworkRef): Promise<void> {
    return this.locks.run(ref.sandboxId, async () => {
      try {
        await this.del(ref);
      } catch (err) {
        throw wrap(err, `failed to teardown network for sandbox ${JSON.stringify(ref.sandboxId)}`);
      }
    });
  }

  /** CNI CHECK (spec 0.4.0+): the plugins confirm the attachment is still as ADD left it. */
  check(ref: PodNetworkRef): Promise<void> {
    return this.locks.run(ref.sandboxId, async () => {
      try {
        await this.checkAttachment(ref);
      } catch (err) {
        throw wrap(err, `failed to check network for sandbox ${JSON.stringify(ref.sandboxId)}`);
      }
    });
  }

  /** The recorded result of a successful setup, or undefined (after a restart, too). */
  async status(sandboxId: string): Promise<PodNetworkResult | undefined> {
    const entry = this.cache.getSync(sandboxId, IF_NAME);
    return entry?.result ? toPodNetworkResult(entry.network.name, entry.result) : undefined;
  }

  /** Problems with the current network's plugins (missing binaries, unsupported cniVersion), via VERSION. */
  async validateNetwork(): Promise<string[]> {
    const lookup = await this.config.current();
    if (!lookup.network) return [lookup.reason];
    const problems: string[] = [];
    for (const plugin of lookup.network.plugins) {
      try {
        const info = await this.exec.version(await this.exec.findPlugin(plugin.type), lookup.network.cniVersion);
        if (!info.supportedVersions.includes(lookup.network.cniVersion))
          problems.push(`plugin ${pluginDescription(plugin)} does not support config version ${JSON.stringify(lookup.network.cniVersion)}`);
      } catch (err) {
        problems.push(`plugin ${pluginDescription(plugin)}: ${messageOf(err)}`);
      }
    }
    return problems;
  }

  private async add(req: PodNetworkRequest): Promise<PodNetworkResult> {
    checkSandboxId(req.sandboxId);
    const lookup = await this.config.current();
    if (!lookup.network) throw failedPrecondition(lookup.reason);
    if (!(await isNetns(req.netnsPath))) throw invalidArgument(`${req.netnsPath} is not a network namespace`);
    if (await this.cache.get(req.sandboxId, IF_NAME)) throw alreadyExists('the pod network is already set up; tear it down first');
    const { raw: _raw, ...network } = lookup.network;
    const entry: CniCacheEntry = {
      kind: CACHE_KIND,
      containerId: req.sandboxId,
      ifName: IF_NAME,
      network,
      cniArgs: buildCniArgs(req),
      capabilityArgs: buildCapabilityArgs(req),
      pluginsToDelete: network.plugins.length,
    };
    const list = listCall(entry, req.netnsPath);
    // Recorded before any plugin runs: a crash mid-ADD still leaves the way to DEL. Without fsync: a
    // killed daemon's write stays in the page cache, and after a power loss what ADD made in the kernel
    // (veth, routes, iptables, the netns) is gone; the plugins do not fsync their own files either.
    await this.cache.put(entry, { durable: false });
    const progress: AddProgress = { tried: 0, succeeded: 0 };
    try {
      const result = await this.lists.add(list, progress);
      await this.cache.put({ ...entry, result });
      return toPodNetworkResult(network.name, result);
    } catch (err) {
      await this.undoFailedAdd(entry, list, progress);
      throw err;
    }
  }

  /** DELs what a failed ADD tried; keeps the record only while some DEL is still owed. Never throws. */
  private async undoFailedAdd(entry: CniCacheEntry, list: ListCall, progress: AddProgress): Promise<void> {
    try {
      const owed = await this.lists.undoAdd(list, progress);
      if (owed === 0) await this.cache.remove(entry.containerId, entry.ifName);
      else await this.cache.put({ ...entry, pluginsToDelete: owed });
    } catch (err) {
      this.log.error('cleanup after failed CNI ADD', { sandboxId: entry.containerId, error: messageOf(err) });
    }
  }

  private async del(ref: PodNetworkRef): Promise<void> {
    checkSandboxId(ref.sandboxId);
    const entry = await this.cache.get(ref.sandboxId, IF_NAME);
    if (!entry) {
      this.log.debug('no CNI attachment to delete', { sandboxId: ref.sandboxId });
      return;
    }
    // An empty CNI_NETNS tells plugins the namespace is gone (containerd does the same).
    const netns = ref.netnsPath && (await isNetns(ref.netnsPath)) ? ref.netnsPath : '';
    const { cniVersion } = entry.network;
    // Spec 0.4.0 added prevResult on DEL.
    const prev = entry.result && versionAtLeast(cniVersion, '0.4.0') ? convertResult(entry.result, cniVersion) : undefined;
    await this.lists.del(listCall(entry, netns), entry.pluginsToDelete, prev);
    await this.cache.remove(entry.containerId, entry.ifName);
  }

  private async checkAttachment(ref: PodNetworkRef): Promise<void> {
    checkSandboxId(ref.sandboxId);
    const entry = await this.cache.get(ref.sandboxId, IF_NAME);
    if (!entry?.result) throw notFound('no network attachment recorded');
    const { network } = entry;
    if (!versionAtLeast(network.cniVersion, '0.4.0'))
      throw failedPrecondition(`configuration version ${JSON.stringify(network.cniVersion)} does not support the CHECK command`);
    if (network.disableCheck) return;
    if (!(await isNetns(ref.netnsPath))) throw failedPrecondition(`${ref.netnsPath} is not a network namespace`);
    await this.lists.check(listCall(entry, ref.netnsPath), convertResult(entry.result, network.cniVersion));
  }
}

function listCall(entry: CniCacheEntry, netns: string): ListCall {
  return {
    network: entry.network,
    params: { containerId: entry.containerId, netns, ifName: entry.ifName, cniArgs: formatCniArgs(entry.cniArgs) },
    capabilityArgs: entry.capabilityArgs,
  };
}
