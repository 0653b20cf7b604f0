/**
 * Records kept in memory and on disk: each record is `<dir>/<id>/<file>`, written atomically on every
 * change, and all of them are loaded back at start-up. Sandbox and container stores build on this.
 */
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { readJsonFile, writeJsonAtomic, type WriteOptions } from './atomic-file.js';
import { resolveIdPrefix } from '../common/ids.js';
import type { Logger } from '../common/logger.js';
import { messageOf } from '../common/errors.js';

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
    /** What a record is, for error messages ("sandbox", "container"). */
    private readonly kind: string,
  ) {}

  private pathOf(id: string): string {
    return join(this.dir, id, this.file);
  }

  /** Loads every record from disk; unreadable ones are logged and skipped. */
  async load(log: Logger): Promise<T[]> {
    let ids: string[] = [];
    try {
      ids = await readdir(this.dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    for (const id of ids) {
      try {
        const record = await readJsonFile<T>(this.pathOf(id));
        if (record) this.records.set(id, record);
        else log.warn(`${this.kind} directory without a record; removing it`, { id });
        if (!record) await rm(join(this.dir, id), { recursive: true, force: true });
      } catch (err) {
        log.error(`cannot load ${this.kind} record`, { id, error: messageOf(err) });
      }
    }
    return [...this.records.values()];
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
    if (!current) throw new Error(`${this.kind} ${id} not in store`);
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
