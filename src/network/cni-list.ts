/**
 * Running a whole network list, as libcni's AddNetworkList / DelNetworkList / CheckNetworkList do:
 * ADD down the list chaining each result into the next plugin's prevResult, DEL up the list, CHECK
 * down it with the cached result. Errors name the plugin: `plugin type="bridge" failed (add): …`.
 */
import { wrap, type StoveError } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import { pluginRequestConfig } from './cni-args.js';
import type { CniNetworkList, CniPluginConf } from './cni-config.js';
import { CniError, type CniExec, type CniInvocation } from './cni-exec.js';
import { convertResult, type CniResult } from './cni-result.js';

/** The parts of a network list that a call needs (the cache keeps exactly these). */
export type CniNetwork = Pick<CniNetworkList, 'name' | 'cniVersion' | 'plugins' | 'disableCheck' | 'source'>;

/** One call of a list: the attachment's CNI_* parameters and its capability arguments. */
export interface ListCall {
  network: CniNetwork;
  params: Omit<CniInvocation, 'command'>;
  capabilityArgs: Record<string, unknown>;
}

/** How far an ADD got: plugins started (binary found) and plugins that returned a result. */
export interface AddProgress {
  tried: number;
  succeeded: number;
}

/** libcni's plugin description in errors: `type="bridge"`, plus `name="…"` if the plugin has one. */
export function pluginDescription(plugin: CniPluginConf): string {
  const name = typeof plugin.name === 'string' && plugin.name ? ` name=${JSON.stringify(plugin.name)}` : '';
  return `type=${JSON.stringify(plugin.type)}${name}`;
}

/** `plugin type="bridge" failed (add): <plugin message>`, keeping the error's kind. */
export function pluginFailure(err: unknown, plugin: CniPluginConf, action: 'add' | 'delete' | 'check'): StoveError {
  return wrap(err, `plugin ${pluginDescription(plugin)} failed (${action})`);
}

export class CniListRunner {
  constructor(
    private readonly exec: CniExec,
    private readonly log: Logger,
  ) {}

  /** ADD through every plugin; returns the last result, in the list's version. `progress` survives a throw. */
  async add(list: ListCall, progress: AddProgress): Promise<CniResult> {
    const { network } = list;
    let prev: CniResult | undefined;
    for (const [i, plugin] of network.plugins.entries()) {
      try {
        const path = await this.exec.findPlugin(plugin.type);
        progress.tried = i + 1;
        const raw = await this.exec.invoke(path, { ...list.params, command: 'ADD' }, pluginRequestConfig(network, plugin, list.capabilityArgs, prev));
        prev = convertResult(raw, network.cniVersion);
        progress.succeeded = i + 1;
      } catch (err) {
        // A plugin that never ran holds nothing, so no DEL is owed to it.
        if (err instanceof CniError && !err.executed) progress.tried = i;
        throw pluginFailure(err, plugin, 'add');
      }
    }
    return prev!;
  }

  /** DEL through the first `count` plugins, last first; stops at the first failure (spec). */
  async del(list: ListCall, count: number, prevResult?: CniResult): Promise<void> {
    for (let i = count - 1; i >= 0; i--) {
      const plugin = list.network.plugins[i]!;
      try {
        await this.run(list, plugin, 'DEL', prevResult);
      } catch (err) {
        throw pluginFailure(err, plugin, 'delete');
      }
    }
  }

  /**
   * Undoes a failed ADD: DEL for every plugin whose ADD was tried, last first, past errors (logged).
   * Returns how many plugins from the start may still hold resources: those whose ADD had succeeded
   * but whose DEL failed. The plugin whose ADD failed gets its DEL too, but its failure is not counted:
   * a config that breaks ADD usually breaks DEL the same way (portmap parses both alike), and a debt
   * that can never be paid would only block teardown forever.
   */
  async undoAdd(list: ListCall, progress: AddProgress): Promise<number> {
    let owed = 0;
    for (let i = progress.tried - 1; i >= 0; i--) {
      const plugin = list.network.plugins[i]!;
      try {
        await this.run(list, plugin, 'DEL');
      } catch (err) {
        if (i < progress.succeeded) owed = Math.max(owed, i + 1);
        this.log.error('cleanup after failed CNI ADD', { containerId: list.params.containerId, error: pluginFailure(err, plugin, 'delete').message });
      }
    }
    return owed;
  }

  private async run(list: ListCall, plugin: CniPluginConf, command: 'DEL' | 'CHECK', prevResult?: CniResult): Promise<void> {
    const path = await this.exec.findPlugin(plugin.type);
    await this.exec.invoke(path, { ...list.params, command }, pluginRequestConfig(list.network, plugin, list.capabilityArgs, prevResult));
  }

  /** CHECK through every plugin with the cached result. */
  async check(list: ListCall, prevResult: CniResult): Promise<void> {
    for (const plugin of list.network.plugins) {
      try {
        await this.run(list, plugin, 'CHECK', prevResult);
      } catch (err) {
        throw pluginFailure(err, plugin, 'check');
      }
    }
  }
}
