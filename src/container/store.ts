/**
 * The container store: every container record, on disk under `<root>/containers/<id>/container.json`
 * and in memory, plus the name index that makes a second container with the same metadata in a pod
 * ALREADY_EXISTS, and a per-sandbox view for pod operations.
 */
import { join } from 'node:path';
import { RecordStore } from '../persist/record-store.js';
import type { Quarantine } from '../persist/quarantine.js';
import { NameIndex } from '../common/name-index.js';
import type { Logger } from '../common/logger.js';
import type { ContainerRecord } from './model.js';

export const CONTAINER_RECORD_FILE = 'container.json';

export class ContainerStore extends RecordStore<ContainerRecord> {
  readonly names = new NameIndex();

  constructor(root: string, quarantine?: Quarantine) {
    super(join(root, 'containers'), CONTAINER_RECORD_FILE, 'container', quarantine);
  }

  /** Loads the records and re-reserves their names. */
  override async load(log: Logger): Promise<ContainerRecord[]> {
    const records = await super.load(log);
    for (const r of records) this.names.reserve(r.name, r.id, 'container');
    return records;
  }

  /** Every container of one sandbox. */
  ofSandbox(sandboxId: string): ContainerRecord[] {
    return this.list().filter((r) => r.sandboxId === sandboxId);
  }
}
