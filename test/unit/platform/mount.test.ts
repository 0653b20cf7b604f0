import assert from 'node:assert/strict';
import { mountFlags } from '../../../src/platform/mount.js';

describe('mount options to mount(2) flags', function () {
  it('turns flag words into flags and keeps the rest as the filesystem data, in order', function () {
    assert.deepEqual(mountFlags(['nosuid', 'nodev', 'noexec', 'mode=1777', 'size=67108864']), { flags: 0x2 | 0x4 | 0x8, data: 'mode=1777,size=67108864' });
    assert.deepEqual(mountFlags(['lowerdir=l/a:l/b', 'upperdir=/u', 'workdir=/w', 'metacopy=on']), {
      flags: 0,
      data: 'lowerdir=l/a:l/b,upperdir=/u,workdir=/w,metacopy=on',
    });
    assert.deepEqual(mountFlags([]), { flags: 0, data: '' });
    assert.deepEqual(mountFlags(['bind']), { flags: 0x1000, data: '' });
    assert.deepEqual(mountFlags(['rbind', 'ro']), { flags: 0x1000 | 0x4000 | 0x1, data: '' });
  });

  it('lets a later word undo an earlier one, as util-linux does', function () {
    assert.deepEqual(mountFlags(['ro', 'rw', 'noexec', 'exec', 'nosuid']), { flags: 0x2, data: '' });
    assert.deepEqual(mountFlags(['defaults', 'noatime', 'strictatime']), { flags: 0x400 | 0x1000000, data: '' });
  });

  it('leaves remounts and propagation changes to util-linux', function () {
    for (const word of ['remount', 'private', 'rprivate', 'shared', 'rshared', 'slave', 'rslave', 'unbindable', 'runbindable']) {
      assert.equal(mountFlags(['nosuid', word]), undefined, word);
    }
  });
});
