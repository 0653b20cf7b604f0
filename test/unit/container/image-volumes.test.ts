import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Mount } from '../../../src/gen/runtime/v1/api.js';
import { checkImageMounts, statusMounts } from '../../../src/container/image-volumes.js';
import { resolveInRoot } from '../../../src/platform/resolve-in-root.js';
import { StoveError } from '../../../src/common/errors.js';

const imageMount = (p: Partial<Mount>) => Mount.fromPartial({ containerPath: '/vol', image: { image: 'sha256:abc' }, ...p });

function throwsKind(fn: () => unknown, kind: string, re: RegExp): void {
  assert.throws(fn, (err: unknown) => err instanceof StoveError && err.kind === kind && re.test(err.message));
}

async function rejectsKind(p: Promise<unknown>, kind: string, re: RegExp): Promise<void> {
  await assert.rejects(p, (err: unknown) => err instanceof StoveError && err.kind === kind && re.test(err.message));
}

describe('image volumes', () => {
  it('checks image mounts before anything exists', () => {
    checkImageMounts([imageMount({}), imageMount({ imageSubPath: 'a/b' }), Mount.fromPartial({ containerPath: '/h', hostPath: '/tmp' })]);
    throwsKind(() => checkImageMounts([imageMount({ hostPath: '/tmp' })]), 'InvalidArgument', /both host_path "\/tmp" and image/);
    throwsKind(() => checkImageMounts([imageMount({ imageSubPath: '../etc' })]), 'InvalidArgument', /must not contain "\.\."/);
    throwsKind(() => checkImageMounts([imageMount({ imageSubPath: 'a/../../b' })]), 'InvalidArgument', /must not contain "\.\."/);
    throwsKind(() => checkImageMounts([imageMount({ imageSubPath: '/etc' })]), 'InvalidArgument', /relative to the image's root/);
    throwsKind(() => checkImageMounts([imageMount({ imageSubPath: 'a\0b' })]), 'InvalidArgument', /not a valid path/);
    throwsKind(() => checkImageMounts([imageMount({ containerPath: 'rel' })]), 'InvalidArgument', /absolute/);
    throwsKind(() => checkImageMounts([Mount.fromPartial({ containerPath: '/h', hostPath: '/tmp', imageSubPath: 'x' })]), 'InvalidArgument', /needs an image/);
  });

  it('reports image volumes read-only with their image_ref', () => {
    const mounts = [Mount.fromPartial({ containerPath: '/h', hostPath: '/tmp' }), imageMount({ imageSubPath: 'sub' })];
    const out = statusMounts(mounts, [{ mount: 1, image: 'sha256:abc', imageId: 'sha256:abc', imageRef: 'reg/x@sha256:def', subPath: 'sub', source: '/s' }]);
    assert.deepEqual(out[0], mounts[0]);
    assert.equal(out[1]!.readonly, true);
    assert.equal(out[1]!.image!.imageRef, 'reg/x@sha256:def');
    assert.equal(out[1]!.image!.image, 'sha256:abc');
  });

  describe('resolveInRoot', () => {
    let root: string;
    before(async () => {
      root = await mkdtemp(join(tmpdir(), 'stove-rir-'));
      await mkdir(join(root, 'usr/share/data'), { recursive: true });
      await writeFile(join(root, 'usr/share/file'), 'x');
      await symlink('/usr/share', join(root, 'abs'));
      await symlink('usr/share/data', join(root, 'rel'));
      await symlink('../../..', join(root, 'usr/share/up'));
      await symlink('/../../etc', join(root, 'rooted'));
      await symlink('loop', join(root, 'loop'));
    });
    after(() => rm(root, { recursive: true, force: true }));

    it('follows symlinks inside the root, absolute ones from the root', async () => {
      assert.equal(await resolveInRoot(root, 'usr/share/data', 'p'), join(root, 'usr/share/data'));
      assert.equal(await resolveInRoot(root, 'abs/data', 'p'), join(root, 'usr/share/data'));
      assert.equal(await resolveInRoot(root, 'rel', 'p'), join(root, 'usr/share/data'));
      assert.equal(await resolveInRoot(root, './usr//share/', 'p'), join(root, 'usr/share'));
    });

    it('never leaves the root, names what is missing, stops loops', async () => {
      await rejectsKind(resolveInRoot(root, 'usr/share/up', 'p'), 'InvalidArgument', /outside its root/);
      await rejectsKind(resolveInRoot(root, 'rooted', 'p'), 'InvalidArgument', /outside its root/);
      await rejectsKind(resolveInRoot(root, 'usr/nope/x', 'sub path'), 'NotFound', /sub path does not exist \(no "usr\/nope"\)/);
      await rejectsKind(resolveInRoot(root, 'usr/share/file/x', 'p'), 'NotFound', /does not exist/);
      await rejectsKind(resolveInRoot(root, 'loop', 'p'), 'InvalidArgument', /too many levels/);
    });
  });
});
