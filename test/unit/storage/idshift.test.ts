/** Id arithmetic of the root filesystem shift for user-namespace pods (no root needed). */
import assert from 'node:assert/strict';
import { hostIdOf, shiftFileCaps } from '../../../src/storage/idshift.js';
import { overlayOptions as overlayOptionsFor } from '../../../src/storage/rootfs.js';

const uids = [
  { containerId: 0, hostId: 400000, size: 1000 },
  { containerId: 1000, hostId: 500000, size: 10 },
];

/** A v2 `security.capability` value: effective flag, permitted = CAP_NET_RAW (bit 13). */
function capsV2(): Buffer {
  const b = Buffer.alloc(20);
  b.writeUInt32LE(0x02000001, 0);
  b.writeUInt32LE(1 << 13, 4);
  return b;
}

describe('root filesystem id shift', () => {
  it('maps ids through every range and leaves ids outside them unmapped', () => {
    assert.equal(hostIdOf(uids, 0), 400000);
    assert.equal(hostIdOf(uids, 999), 400999);
    assert.equal(hostIdOf(uids, 1000), 500000);
    assert.equal(hostIdOf(uids, 1009), 500009);
    assert.equal(hostIdOf(uids, 1010), undefined);
    assert.equal(hostIdOf([], 0), undefined);
  });

  it('turns file capabilities into v3 values owned by the namespace root', () => {
    const v3 = shiftFileCaps(capsV2(), uids)!;
    assert.equal(v3.length, 24);
    assert.equal(v3.readUInt32LE(0), 0x03000001, 'revision 3, effective flag kept');
    assert.equal(v3.readUInt32LE(4), 1 << 13, 'permitted set kept');
    assert.equal(v3.readUInt32LE(20), 400000, 'root id = host id of uid 0');
    // A v3 value names its root id: shifted like an owner.
    const own = Buffer.from(v3);
    own.writeUInt32LE(1005, 20);
    assert.equal(shiftFileCaps(own, uids)!.readUInt32LE(20), 500005);
    own.writeUInt32LE(77777, 20);
    assert.equal(shiftFileCaps(own, uids), undefined, 'root id without a mapping');
    assert.equal(shiftFileCaps(Buffer.from('junk'), uids), undefined);
    assert.equal(shiftFileCaps(capsV2().subarray(0, 12), uids), undefined);
  });

  it('mounts a shifted root filesystem with metacopy, so a chown copies no data', () => {
    const base = { baseDir: '/i', lowerDirs: ['l/a', 'l/b'], upperDir: '/c/upper', workDir: '/c/work', target: '/c/rootfs' };
    assert.deepEqual(overlayOptionsFor(base), ['lowerdir=l/a:l/b', 'upperdir=/c/upper', 'workdir=/c/work']);
    assert.deepEqual(overlayOptionsFor({ ...base, metacopy: true }).at(-1), 'metacopy=on');
  });
});
