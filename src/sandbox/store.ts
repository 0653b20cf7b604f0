/**
 * The sandbox store: every pod sandbox record, on disk under `<root>/sandboxes/<id>/sandbox.json` and in
 * memory, plus the name index that makes RunPodSandbox with the same metadata ALREADY_EXISTS.
 */
import { join } from 'node:path';
import { RecordStore } from '../persist/record-store.js';
import type { Quarantine } from '../persist/quarantine.js';
import { NameIndex } from '../common/name-index.js';
import type { Logger } from '../common/logger.js';
import type { SandboxRecord } from './model.js';

export class SandboxStore extends RecordStore<SandboxRecord> {
  readonly names = new NameIndex();

  constructor(root: string, quarantine?: Quarantine) {
    super(join(root, 'sandboxes'), 'sandbox.json', 'sandbox', quarantine);
  }

  /** Loads the records and re-reserves their names. */
  override async load(log: Logger): Promise<SandboxRecord[]> {
    const records = await super.load(log);
    for (const r of records) this.names.reserve(r.name, r.id, 'sandbox');
    return records;
  }
}
