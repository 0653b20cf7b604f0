/**
 * Runtime handlers: the OCI runtime a pod's runtime_handler names. `runc` (and '', the default) is the
 * configured runc; `runtime.handlers` in the config adds more (e.g. crun). The container module runs a
 * pod's containers with `get(record.runtimeHandler)`.
 */
import { notFound } from '../common/errors.js';
import type { Logger } from '../common/logger.js';
import { Runc } from './runc.js';

export const DEFAULT_HANDLER = 'runc';

export interface RuntimeHandlerOptions {
  /** The default runtime: binary and state root. */
  runc: { binary: string; root: string };
  /** Extra handlers by name (config `runtime.handlers`). */
  handlers: Record<string, { path: string; root: string }>;
  systemdCgroup: boolean;
  log?: Logger;
}

export class RuntimeHandlerSet {
  private readonly runtimes = new Map<string, Runc>();

  constructor(options: RuntimeHandlerOptions) {
    const make = (binary: string, root: string) => new Runc({ binary, root, systemdCgroup: options.systemdCgroup, log: options.log });
    this.runtimes.set(DEFAULT_HANDLER, make(options.runc.binary, options.runc.root));
    for (const [name, h] of Object.entries(options.handlers)) {
      if (name === DEFAULT_HANDLER || name === '') continue;
      this.runtimes.set(name, make(h.path, h.root));
    }
  }

  /** The runtime for a handler name ('' = runc); NotFound naming the known handlers otherwise. */
  get(handler: string): Runc {
    const runtime = this.runtimes.get(handler || DEFAULT_HANDLER);
    if (!runtime) {
      throw notFound(`no runtime for "${handler}" is configured (runtime handlers: ${this.names().map((n) => JSON.stringify(n)).join(', ')})`);
    }
    return runtime;
  }

  /** Every handler name, the default first. */
  names(): string[] {
    return [...this.runtimes.keys()];
  }
}
