/**
 * Records kept in memory and on disk: each record is `<dir>/<id>/<file>`, written atomically on every
 * change, and all of them are loaded back at start-up. Sandbox and container stores build on this.
 */
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { readJsonFile, writeJsonAtomic, type WriteOptions } from './atomic-file.js';
import { resolveIdPrefix } from '../common/ids.js';
import type { Logger } from '../common/logger.js';
import { messageOf, notFound } from '../common/errors.js';
import type { Quarantine, QuarantineKind } from './quarantine.js';

export interface Identified {
  id: string;
}

export class RecordStore<T extends Identified> {
  private readonly records = new Map<string, T>();

  constructor(
    /** Directory holding one sub-directory per record. */
    private readonly dir: string,
    /** File name of the record inside its directory. */
    private readonly file: string,
    /** What a record is, for error messages and quarantine entries. */
    private readonly kind: QuarantineKind,
    /** Where unreadable records go (without one they are only logged and skipped). */
    private readonly quarantine?: Quarantine,
  ) {}

  private pathOf(id: string): string {
    return join(this.dir, id, this.file);
  }

  /**
   * Loads every record from disk. An unreadable one goes to quarantine, and its directory stays; a
   * directory without a record (an interrupted create) is removed unless its record is in quarantine.
   */
  async load(log: Logger): Promise<T[]> {
    let ids: string[] = [];
    try {
      ids = await readdir(this.dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    for (const id of ids) {
      let record: T | undefined;
      try {
        record = await readJsonFile<T>(this.pathOf(id));
        if (record !== undefined && (typeof record !== 'object' || record === null || record.id !== id))
          throw new Error(`not a ${this.kind} record for ${id}`);
      } catch (err) {
        if (this.quarantine) await this.quarantine.move(this.kind, id, this.pathOf(id), err);
        else log.error(`cannot load ${this.kind} record`, { id, error: messageOf(err) });
        continue;
      }
      if (record) {
        this.records.set(id, record);
      } else if (this.quarantine?.has(this.kind, id)) {
        log.warn(`${this.kind} directory kept: its record is in quarantine`, { id });
      } else {
        log.warn(`${this.kind} directory without a record; removing it`, { id });
        await rm(join(this.dir, id), { recursive: true, force: true });
      }
    }
    return [...this.records.values()];
  }

  /** IDs whose records are in quarantine: what they describe is not to be touched. */
  quarantinedIds(): Set<string> {
    return this.quarantine?.ids(this.kind) ?? new Set();
  }

  /** Writes the record to disk and then to memory. */
  async put(record: T, options?: WriteOptions): Promise<void> {
    await writeJsonAtomic(this.pathOf(record.id), record, options);
    this.records.set(record.id, record);
  }

  /**
   * Applies `change` to a copy of the record and stores the result (`durable: false` only for a change
   * recovery can derive again, see writeFileAtomic).
   */
  async update(id: string, change: (record: T) => void, options?: WriteOptions): Promise<T> {
    const current = this.records.get(id);
    if (!current) throw notFound(`${this.kind} ${id} not in store`);
    const next = structuredClone(current);
    change(next);
    await this.put(next, options);
    return next;
  }

  /** Forgets the record and deletes its directory. */
  async delete(id: string): Promise<void> {
    this.records.delete(id);
    await rm(join(this.dir, id), { recursive: true, force: true });
  }

  get(id: string): T | undefined {
    return this.records.get(id);
  }

  /** The record with this ID or unique ID prefix; NOT_FOUND otherwise. */
  resolve(idOrPrefix: string): T {
    // A full ID (what the kubelet sends) is one lookup; a prefix is matched against every ID.
    const exact = this.records.get(idOrPrefix);
    if (exact) return exact;
    const id = resolveIdPrefix(this.records.keys(), idOrPrefix, this.kind);
    return this.records.get(id)!;
  }

  /** The record with this ID or unique prefix, or undefined when none matches. */
  find(idOrPrefix: string): T | undefined {
    try {
      return this.resolve(idOrPrefix);
    } catch {
      return undefined;
    }
  }

  list(): T[] {
    return [...this.records.values()];
  }
}
