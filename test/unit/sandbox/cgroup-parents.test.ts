/**
 * Which pods sit under a cgroup parent level a pod made: a level is removed only when no other pod,
 * stored or still being run, is under it, and a level kept goes with the last pod under it.
 */
import assert from 'node:assert/strict';
import { CgroupParentUsers } from '../../../src/sandbox/cgroup-parents.js';

describe('sandbox: cgroup parent levels pods made', () => {
  let stored: { id: string; cgroupParent: string }[];
  let users: CgroupParentUsers;
  beforeEach(() => {
    stored = [];
    users = new CgroupParentUsers(() => stored);
  });

  it('removes the levels a pod made, deepest first, when no other pod is under them', () => {
    stored = [{ id: 'a', cgroupParent: '/k/x/a' }];
    assert.deepEqual(users.removable('/k/x/a', ['/k', '/k/x/a', '/k/x'], { id: 'a' }), ['/k/x/a', '/k/x', '/k']);
  });

  it('keeps a level while a run under it is in flight (its runc create makes its cgroup there), and not after', () => {
    stored = [{ id: 'a', cgroupParent: '/k/a' }];
    const release = users.claim('/k/b');
    assert.deepEqual(users.removable('/k/a', ['/k/a', '/k'], { id: 'a' }), ['/k/a']);
    release();
    release(); // a second release does nothing to other claims
    stored = [{ id: 'b', cgroupParent: '/k/b' }];
    assert.deepEqual(users.removable('/k/b', ['/k/b'], { id: 'b' }), ['/k/b', '/k'], 'the kept level goes with the last pod under it');
  });

  it('keeps a level while another stored pod is under it; a failed run leaves its own claim out', () => {
    stored = [{ id: 'b', cgroupParent: '/k/b' }];
    const release = users.claim('/k/a');
    assert.deepEqual(users.removable('/k/a', ['/k/a', '/k'], { claimedParent: '/k/a' }), ['/k/a']);
    release();
    stored = [];
    assert.deepEqual(users.removable('/k/b', [], { id: 'b' }), ['/k']);
  });

  it('counts only pods at or below a level: a sibling with a common name prefix, or a systemd slice, is not under it', () => {
    stored = [
      { id: 'b', cgroupParent: '/kube' },
      { id: 'c', cgroupParent: 'kubepods.slice' },
      { id: 'd', cgroupParent: '/k//x/' },
    ];
    users.claim('/kubepods-other');
    assert.deepEqual(users.removable('/k/a', ['/k/a', '/k'], { id: 'a' }), ['/k/a'], '/k/x (written /k//x/) is under /k');
    stored = [];
    assert.deepEqual(users.removable('/k/x', [], { id: 'd' }), ['/k']);
  });

  it('counts pods under a slice level by the slice\'s expanded path (systemd driver)', () => {
    const level = '/kubepods.slice/kubepods-besteffort.slice';
    stored = [
      { id: 'a', cgroupParent: 'kubepods-besteffort-poda.slice' },
      { id: 'b', cgroupParent: 'kubepods-besteffort-podb.slice' },
    ];
    const made = [`${level}/kubepods-besteffort-poda.slice`, level];
    assert.deepEqual(users.removable('kubepods-besteffort-poda.slice', made, { id: 'a' }), [made[0]], 'pod b is still under the besteffort slice');
    stored = [{ id: 'b', cgroupParent: 'kubepods-besteffort-podb.slice' }];
    assert.deepEqual(users.removable('kubepods-besteffort-podb.slice', [], { id: 'b' }), [level], 'it goes with the last pod under it');
  });
});
