import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CACHE_KIND, CniCache, type CniCacheEntry } from '../../../src/network/cni-cache.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

describe('network/cni-cache: the attachment cache', () => {
  const dir = tempDirPerTest('stove-cni-cache-');

  const entry = (containerId: string): CniCacheEntry => ({
    kind: CACHE_KIND,
    containerId,
    ifName: 'eth0',
    network: { name: 'pods', cniVersion: '1.0.0', plugins: [{ type: 'bridge' }] } as unknown as CniCacheEntry['network'],
    cniArgs: [['K8S_POD_NAME', 'web']],
    capabilityArgs: {},
    pluginsToDelete: 1,
    result: { cniVersion: '1.0.0', ips: [{ address: '10.22.0.7/24' }] } as unknown as CniCacheEntry['result'],
  });

  it('reads the same entry with get and getSync (the status path), and nothing once it is removed', async () => {
    const cache = new CniCache(dir());
    await cache.put(entry('a1'), { durable: false });
    assert.deepEqual(cache.getSync('a1', 'eth0'), entry('a1'));
    assert.deepEqual(cache.getSync('a1', 'eth0'), await cache.get('a1', 'eth0'));
    assert.equal(cache.getSync('a1', 'eth1'), undefined);
    await cache.remove('a1', 'eth0');
    assert.equal(cache.getSync('a1', 'eth0'), undefined);
    assert.equal(await cache.get('a1', 'eth0'), undefined);
  });

  it('ignores a file of another kind and refuses a corrupt one, with get and getSync alike', async () => {
    const cache = new CniCache(dir());
    await writeFile(join(dir(), 'b2-eth0.json'), JSON.stringify({ ...entry('b2'), kind: 'other' }));
    assert.equal(cache.getSync('b2', 'eth0'), undefined);
    assert.equal(await cache.get('b2', 'eth0'), undefined);
    await writeFile(join(dir(), 'c3-eth0.json'), '{"kind": "stoveCniCacheV1", ');
    assert.throws(() => cache.getSync('c3', 'eth0'));
    await assert.rejects(cache.get('c3', 'eth0'));
  });
});
