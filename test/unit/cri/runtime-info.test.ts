/** Status and UpdateRuntimeConfig over the runtime's facts: the quarantine condition, the pod CIDR. */
import assert from 'node:assert/strict';
import { defaultConfig } from '../../../src/config/schema.js';
import { silentLogger } from '../../../src/common/logger.js';
import { RuntimeInfo } from '../../../src/cri/runtime-info.js';
import { status } from '../../../src/cri/status.js';
import { updateRuntimeConfig } from '../../../src/cri/update-runtime-config.js';
import type { QuarantineEntry } from '../../../src/persist/quarantine.js';

describe('cri: Status and UpdateRuntimeConfig', () => {
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
  const condition = async (info: RuntimeInfo) => (await status(info, { verbose: false })).status!.conditions.find((c) => c.type === 'StoveHasNoRecordsInQuarantine')!;

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
    const ready = (await status(info, { verbose: false })).status!.conditions.find((x) => x.type === 'RuntimeReady')!;
    assert.equal(ready.status, true);
  });

  it('UpdateRuntimeConfig keeps the pod CIDR, tells the network once per change, and verbose Status shows it', async () => {
    const told: string[] = [];
    const info = new RuntimeInfo({ ...infoWith([]).deps, setPodCidr: (cidr) => void told.push(cidr) });
    const push = (podCidr: string) => updateRuntimeConfig(info, { runtimeConfig: { networkConfig: { podCidr } } });
    await push('10.1.0.0/16');
    await push('10.1.0.0/16');
    await push('');
    await push('10.2.0.0/16');
    assert.deepEqual(told, ['10.1.0.0/16', '10.2.0.0/16']);
    assert.equal(info.currentPodCidr, '10.2.0.0/16');
    const verbose = await status(info, { verbose: true });
    const config = JSON.parse(verbose.info.config!) as { podCidr: string; sandboxImage: string };
    assert.equal(config.podCidr, '10.2.0.0/16');
    assert.equal(config.sandboxImage, 'stove/pause');
  });
});
