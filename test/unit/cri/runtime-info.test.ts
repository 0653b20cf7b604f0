/** Status: the quarantine condition next to RuntimeReady and NetworkReady. */
import assert from 'node:assert/strict';
import { defaultConfig } from '../../../src/config/schema.js';
import { silentLogger } from '../../../src/common/logger.js';
import { RuntimeInfo } from '../../../src/cri/runtime-info.js';
import type { QuarantineEntry } from '../../../src/persist/quarantine.js';

describe('cri/runtime-info', () => {
  const entry = (kind: QuarantineEntry['kind'], id: string): QuarantineEntry => ({ kind, id, path: `/q/${id}`, from: `/r/${id}`, error: 'bad JSON', at: '' });
  const infoWith = (entries: QuarantineEntry[]) =>
    new RuntimeInfo({
      config: defaultConfig(),
      version: '1.0.0',
      log: silentLogger,
      networkReadiness: async () => ({ ready: true, reason: '', message: '' }),
      runtimeHandlers: () => [],
      quarantine: () => entries,
    });
  const condition = async (info: RuntimeInfo) => (await info.status({ verbose: false })).status!.conditions.find((c) => c.type === 'StoveHasNoRecordsInQuarantine')!;

  it('StoveHasNoRecordsInQuarantine is true without entries', async () => {
    assert.deepEqual(await condition(infoWith([])), { type: 'StoveHasNoRecordsInQuarantine', status: true, reason: '', message: '' });
  });

  it('is false with entries, names the first five and counts the rest; RuntimeReady stays true', async () => {
    const entries = ['a', 'b', 'c', 'd', 'e', 'f', 'g'].map((id) => entry('image', id));
    const info = infoWith(entries);
    const c = await condition(info);
    assert.equal(c.status, false);
    assert.equal(c.reason, 'RecordsInQuarantine');
    assert.match(c.message, /^7 unreadable record\(s\) in quarantine \(image a, image b, image c, image d, image e, and 2 more\)/);
    assert.match(c.message, /see stove check$/);
    const ready = (await info.status({ verbose: false })).status!.conditions.find((x) => x.type === 'RuntimeReady')!;
    assert.equal(ready.status, true);
  });
});
