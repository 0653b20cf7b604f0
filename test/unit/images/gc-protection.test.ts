/** What image garbage collection keeps for records in quarantine, read from their raw bytes. */
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gcProtection } from '../../../src/images/gc-protection.js';
import { chainIds, type LayerRecord } from '../../../src/storage/layers.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

const hex = (c: string) => c.repeat(64);
const usage = { bytes: 0, inodes: 0 };

describe('images/gc-protection', () => {
  const dir = tempDirPerTest('stove-gc-protection-');

  it('keeps every digest in a damaged record, the chain of each kept layer, and an image config’s layers', async () => {
    const blobs = join(dir(), 'blobs');
    await mkdir(blobs);
    // A truncated image record: its file name is all that names the image.
    await writeFile(join(dir(), 'image'), '{"id": "trunc');
    const diffIds = [`sha256:${hex('1')}`, `sha256:${hex('2')}`];
    await writeFile(join(blobs, hex('a')), JSON.stringify({ rootfs: { type: 'layers', diff_ids: diffIds } }));
    // A damaged layer record that still names a layer below, whose own parent loops back to it.
    await writeFile(join(dir(), 'layer'), `{"chainId":"sha256:${hex('3')}","parent":"sha256:${hex('4')}",`);
    const layers = new Map<string, LayerRecord>([
      [`sha256:${hex('4')}`, { chainId: `sha256:${hex('4')}`, diffId: '', digest: `sha256:${hex('5')}`, parent: `sha256:${hex('6')}`, usage, link: '' }],
      [`sha256:${hex('6')}`, { chainId: `sha256:${hex('6')}`, diffId: '', digest: `sha256:${hex('7')}`, parent: `sha256:${hex('4')}`, usage, link: '' }],
    ]);
    // A hold cut short: its image is still named, its container ID is bare hex.
    await writeFile(join(dir(), 'hold'), `{"containerId":"${hex('8')}","imageId":"sha256:${hex('9')}`);
    const protection = await gcProtection({
      quarantined: [
        { kind: 'image', id: hex('a'), path: join(dir(), 'image') },
        { kind: 'layer', id: hex('3'), path: join(dir(), 'layer') },
        { kind: 'hold', id: hex('8'), path: join(dir(), 'hold') },
      ],
      unrecordedImages: [],
      blobPath: (digest) => join(blobs, digest.slice(7)),
      layer: (chainId) => layers.get(chainId),
    });
    const expected = [hex('a'), ...chainIds(diffIds).map((c) => c.slice(7)), hex('3'), hex('4'), hex('5'), hex('6'), hex('7'), hex('8'), hex('9')];
    assert.deepEqual([...protection.hexes].sort(), [...new Set(expected)].sort());
    assert.deepEqual([...protection.heldImages], [`sha256:${hex('9')}`]);
    assert.deepEqual(protection.blockers, []);
  });

  it('blocks collection only when nothing can be learnt', async () => {
    const protection = await gcProtection({
      quarantined: [{ kind: 'image', id: hex('a'), path: join(dir(), 'missing') }],
      unrecordedImages: [`sha256:${hex('b')}`, '../../etc/passwd'],
      blobPath: (digest) => join(dir(), digest.slice(7)),
      layer: () => undefined,
    });
    assert.equal(protection.blockers.length, 3);
    assert.match(protection.blockers[0]!, /^image record a{64} in quarantine cannot be read \(ENOENT/);
    assert.match(protection.blockers[1]!, /^image sha256:b{64}, held by a container, has neither a record nor a config blob$/);
    assert.match(protection.blockers[2]!, /^image \.\.\/\.\.\/etc\/passwd, held/);
  });
});
