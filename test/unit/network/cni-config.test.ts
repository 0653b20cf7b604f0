import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile, utimes } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CniConfigSource, findCniNetwork, parseCniConfig } from '../../../src/network/cni-config.js';

const bridgeList = (name: string) =>
  JSON.stringify({ cniVersion: '1.0.0', name, plugins: [{ type: 'bridge', bridge: 'cni0' }, { type: 'portmap', capabilities: { portMappings: true } }] });

describe('network/cni-config', () => {
  let dir: string;
  beforeEach(async () => (dir = await mkdtemp(join(tmpdir(), 'stove-cniconf-'))));
  afterEach(async () => rm(dir, { recursive: true, force: true }));

  it('parses a list and turns a single-plugin conf into a list', () => {
    const list = parseCniConfig(bridgeList('pods'), '/x/10-pods.conflist');
    assert.ok(typeof list !== 'string');
    assert.equal(list.name, 'pods');
    assert.equal(list.plugins.length, 2);
    const single = parseCniConfig(JSON.stringify({ cniVersion: '0.3.1', name: 'lo', type: 'loopback' }), '/x/99-lo.conf');
    assert.ok(typeof single !== 'string');
    assert.equal(single.cniVersion, '0.3.1');
    assert.deepEqual(single.plugins.map((p) => p.type), ['loopback']);
  });

  it('explains what makes a config unusable', () => {
    const reason = (text: string, source = '/x/a.conflist') => parseCniConfig(text, source) as string;
    assert.match(reason('{'), /invalid JSON/);
    assert.match(reason(JSON.stringify({ name: 'n', type: 'bridge' })), /needs a "plugins" list/);
    assert.match(reason(JSON.stringify({ name: 'n', plugins: [] })), /"plugins" is empty/);
    assert.match(reason(JSON.stringify({ plugins: [{ type: 'bridge' }] })), /missing network "name"/);
    assert.match(reason(JSON.stringify({ name: 'bad name', plugins: [{ type: 'bridge' }] })), /invalid network name/);
    assert.match(reason(JSON.stringify({ name: 'n', plugins: [{ bridge: 'x' }] })), /plugin 0 has no "type"/);
    assert.match(reason(JSON.stringify({ name: 'n', plugins: [{ type: '../sh' }] })), /contains a "\/"/);
    assert.match(reason(JSON.stringify({ name: 'n', cniVersion: 'one', plugins: [{ type: 'bridge' }] })), /invalid cniVersion/);
  });

  it('picks the highest supported entry of cniVersions', () => {
    const list = parseCniConfig(JSON.stringify({ cniVersions: ['0.4.0', '1.0.0', '9.0.0'], name: 'n', plugins: [{ type: 'b' }] }), '/x/a.conflist');
    assert.ok(typeof list !== 'string');
    assert.equal(list.cniVersion, '1.0.0');
  });

  it('uses the first valid file by name and skips broken ones', async () => {
    await writeFile(join(dir, '05-broken.conflist'), '{"name":');
    await writeFile(join(dir, '10-second.conflist'), bridgeList('second'));
    await writeFile(join(dir, '20-third.conflist'), bridgeList('third'));
    await writeFile(join(dir, '00-ignored.txt'), bridgeList('ignored'));
    const lookup = await findCniNetwork(dir);
    assert.equal(lookup.network?.name, 'second');
  });

  it('reports an empty or missing dir as uninitialized', async () => {
    const empty = await findCniNetwork(dir);
    assert.equal(empty.network, undefined);
    assert.match((empty as { reason: string }).reason, /^cni config uninitialized/);
    const missing = await findCniNetwork(join(dir, 'nope'));
    assert.match((missing as { reason: string }).reason, /^cni config uninitialized: cannot read .*ENOENT/);
    await writeFile(join(dir, '10-bad.conf'), '[]');
    const bad = await findCniNetwork(dir);
    assert.match((bad as { reason: string }).reason, /^cni config uninitialized: no valid config in .*10-bad.conf: not a JSON object/);
  });

  it('CniConfigSource follows new, changed and removed files', async () => {
    const source = new CniConfigSource(dir);
    assert.equal((await source.current()).network, undefined);
    const path = join(dir, '10-a.conflist');
    await writeFile(path, bridgeList('first'));
    assert.equal((await source.current()).network?.name, 'first');
    const again = await source.current();
    assert.equal(again, await source.current(), 'unchanged files are not parsed again');
    await writeFile(path, bridgeList('changed'));
    await utimes(path, new Date(), new Date(Date.now() + 5000));
    assert.equal((await source.current()).network?.name, 'changed');
    await rm(path);
    assert.equal((await source.current()).network, undefined);
  });
});
