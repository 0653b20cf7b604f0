/**
 * The CNI attachment cache, in the spirit of libcni's `/var/lib/cni/results`: what ADD was given and
 * what it returned, so DEL and CHECK can run with the same config, arguments and prevResult after a
 * daemon restart, and even after the conf dir changed.
 *
 * An entry is written before the first plugin runs and removed only once every DEL succeeded, so "no
 * entry" means "nothing of this attachment is left to delete". Kept under Stove's persistent root,
 * because host-local's IP reservations (/var/lib/cni/networks) outlive a reboot as well.
 */
import { readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { readJsonFile, readJsonFileSync, writeJsonAtomic, type WriteOptions } from '../persist/atomic-file.js';
import type { CniNetwork } from './cni-list.js';
import type { CniResult } from './cni-result.js';

export const CACHE_KIND = 'stoveCniCacheV1';

/** One pod attachment. */
export interface CniCacheEntry {
  kind: typeof CACHE_KIND;
  containerId: string;
  ifName: string;
  /** The network list as ADD used it (its plugins, name, version, source). */
  network: CniNetwork;
  cniArgs: [string, string][];
  capabilityArgs: Record<string, unknown>;
  /**
   * How many plugins (from the start of the list) may hold resources: all of them once ADD began,
   * fewer after a failed ADD whose cleanup could not finish. DEL visits exactly these, last first.
   */
  pluginsToDelete: number;
  /** The final ADD result, in the list's cniVersion; absent until ADD succeeded. */
  result?: CniResult;
}

/** File-per-attachment store. */
export class CniCache {
  constructor(readonly dir: string) {}

  private path(containerId: string, ifName: string): string {
    return join(this.dir, `${containerId}-${ifName}.json`);
  }

  async get(containerId: string, ifName: string): Promise<CniCacheEntry | undefined> {
    const entry = await readJsonFile<CniCacheEntry>(this.path(containerId, ifName));
    return entry?.kind === CACHE_KIND ? entry : undefined;
  }

  /** `get` for the status path (PodSandboxStatus with `verbose`), without the thread pool. */
  getSync(containerId: string, ifName: string): CniCacheEntry | undefined {
    const entry = readJsonFileSync<CniCacheEntry>(this.path(containerId, ifName));
    return entry?.kind === CACHE_KIND ? entry : undefined;
  }

  async put(entry: CniCacheEntry, options?: WriteOptions): Promise<void> {
    await writeJsonAtomic(this.path(entry.containerId, entry.ifName), entry, options);
  }

  /** Forgets an attachment; a missing entry is fine. */
  async remove(containerId: string, ifName: string): Promise<void> {
    await unlink(this.path(containerId, ifName)).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
  }

  /** Container IDs with an entry (for garbage collection after a restart). */
  async containerIds(): Promise<string[]> {
    const names = await readdir(this.dir).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return [] as string[];
      throw err;
    });
    return names.filter((n) => n.endsWith('.json') && !n.startsWith('.')).map((n) => n.slice(0, n.lastIndexOf('-')));
  }
}
