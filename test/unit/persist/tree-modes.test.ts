import assert from 'node:assert/strict';
import { chmod, lstat, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makePodDir, tightenPodDirs, tightenStateTrees } from '../../../src/persist/tree-modes.js';

const modeOf = async (p: string) => ((await lstat(p)).mode & 0o7777).toString(8);

describe('persist/tree-modes: the modes of the root and state trees', function () {
  let dir = '';
  before(function () {
    if (process.getuid?.() !== 0) this.skip(); // chown to root and to a pod's group
  });
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stove-tree-modes-'));
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it('tightens what an older layout left open, and leaves content and upper dirs alone', async () => {
    const root = join(dir, 'root');
    const state = join(dir, 'state');
    const c = join(root, 'containers', 'c1');
    await mkdir(join(c, 'fs', 'upper', 'etc'), { recursive: true, mode: 0o755 });
    await writeFile(join(c, 'container.json'), '{}', { mode: 0o644 });
    await mkdir(join(root, 'images', 'layers', 'abc', 'diff'), { recursive: true, mode: 0o755 });
    await writeFile(join(root, 'images', 'layers', 'abc', 'layer.json'), '{}', { mode: 0o644 });
    await mkdir(join(state, 'netns'), { recursive: true, mode: 0o755 });
    for (const p of [root, join(root, 'containers'), c, join(c, 'fs'), join(root, 'images')]) await chmod(p, 0o755);

    assert.ok((await tightenStateTrees(root, state)) > 0);
    assert.equal(await modeOf(root), '700');
    assert.equal(await modeOf(join(root, 'containers')), '700');
    assert.equal(await modeOf(c), '700');
    assert.equal(await modeOf(join(c, 'fs')), '700');
    assert.equal(await modeOf(join(c, 'fs', 'upper')), '755', "the upper dir is the container's /");
    assert.equal(await modeOf(join(c, 'container.json')), '600');
    assert.equal(await modeOf(join(root, 'images', 'layers', 'abc', 'layer.json')), '600');
    assert.equal(await modeOf(join(root, 'images', 'layers', 'abc', 'diff')), '755', 'layer content is untouched');
    assert.equal(await modeOf(state), '711');
    assert.equal(await modeOf(join(state, 'containers')), '711');
    assert.equal(await modeOf(join(state, 'netns')), '700');
    assert.equal(await tightenStateTrees(root, state), 0, 'a second pass changes nothing');
  });

  it("gives a user-namespaced pod's dirs its group with 0710, and closes unknown ones to all but root", async () => {
    const state = join(dir, 'state');
    await makePodDir(join(state, 'sandboxes', 'userns-pod'), 710000);
    await makePodDir(join(state, 'sandboxes', 'plain-pod'));
    let st = await lstat(join(state, 'sandboxes', 'userns-pod'));
    assert.deepEqual([st.uid, st.gid, (st.mode & 0o7777).toString(8)], [0, 710000, '710']);
    assert.equal(await modeOf(join(state, 'sandboxes')), '711');
    assert.equal(await modeOf(join(state, 'sandboxes', 'plain-pod')), '700');

    await mkdir(join(state, 'containers', 'old'), { recursive: true, mode: 0o711 });
    await chmod(join(state, 'containers', 'old'), 0o711);
    await chmod(join(state, 'sandboxes', 'userns-pod'), 0o711);
    const changed = await tightenPodDirs(state, [{ path: join(state, 'sandboxes', 'userns-pod'), podGid: 710000 }]);
    assert.equal(changed, 2);
    st = await lstat(join(state, 'sandboxes', 'userns-pod'));
    assert.deepEqual([st.gid, (st.mode & 0o7777).toString(8)], [710000, '710']);
    assert.equal(await modeOf(join(state, 'containers', 'old')), '700');
  });
});
