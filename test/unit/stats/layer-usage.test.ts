/**
 * A writable layer's usage: the walk counts every inode once (hard links once) across its slices, and
 * container stats walk a layer at most once per refresh period: calls in the meantime (a kubelet's
 * ListContainerStats and ListPodSandboxStats back to back) share the last walk, and a walk after the
 * period sees what changed.
 */
import assert from 'node:assert/strict';
import { link, mkdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ContainerConfig } from '../../../src/gen/runtime/v1/api.js';
import type { ContainerRecord } from '../../../src/container/model.js';
import { silentLogger } from '../../../src/common/logger.js';
import { StatsReader } from '../../../src/stats/stats.js';
import { diskUsage } from '../../../src/storage/rootfs.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';
import { eventually } from '../../helpers/wait.js';

describe('stats: writable layer usage', () => {
  const dir = tempDirPerTest('stove-layer-usage-');
  const record = (id: string) => ({ id, name: id, cgroupsPath: '', config: ContainerConfig.toJSON(ContainerConfig.fromPartial({ metadata: { name: id } })) }) as unknown as ContainerRecord;

  it('counts every inode once across slices of the walk, hard links once, a missing dir as nothing', async () => {
    const root = join(dir(), 'tree');
    let expected = 1; // root
    for (let d = 0; d < 3; d++) {
      const sub = join(root, `d${d}`, 'deeper');
      await mkdir(sub, { recursive: true });
      expected += 2;
      for (let f = 0; f < 400; f++) await writeFile(join(sub, `f${f}`), 'x');
      expected += 400;
    }
    const without = await diskUsage(root);
    assert.equal(without.inodes, BigInt(expected), 'the 1204 entries: more than two slices');
    await writeFile(join(root, 'big'), Buffer.alloc(1 << 20, 7));
    const once = await diskUsage(root);
    assert.ok(once.bytes - without.bytes >= 1n << 20n, 'the 1 MiB file counted');
    await link(join(root, 'big'), join(root, 'd0', 'big-again'));
    await link(join(root, 'big'), join(root, 'd2', 'deeper', 'big-thrice'));
    assert.deepEqual(await diskUsage(root), once, 'a file of three links counted once');
    assert.deepEqual(await diskUsage(join(dir(), 'absent')), { bytes: 0n, inodes: 0n });
  });

  it('reads a large directory through a handle and a small one whole, counting both alike', async () => {
    const root = join(dir(), 'wide');
    await mkdir(join(root, 'small'), { recursive: true });
    for (let f = 0; f < 3000; f++) await writeFile(join(root, `entry-with-a-longer-name-${f}`), '');
    for (let f = 0; f < 5; f++) await writeFile(join(root, 'small', `f${f}`), '');
    assert.ok((await stat(root)).size > 16 << 10, 'the wide directory is over the whole-read size');
    assert.equal((await diskUsage(root)).inodes, BigInt(1 + 3000 + 1 + 5));
  });

  it('walks a layer once per refresh period, and again after it', async () => {
    const upper = (id: string) => join(dir(), id, 'upper');
    await mkdir(upper('a'), { recursive: true });
    await mkdir(upper('b'), { recursive: true });
    await writeFile(join(upper('a'), 'one'), Buffer.alloc(8192, 1));
    const walks: string[] = [];
    const reader = new StatsReader({
      cgroups: { version: 2, hierarchies: [] },
      images: {
        rootfsUsage: (id) => {
          walks.push(id);
          return diskUsage(upper(id));
        },
        writableLayerFs: () => dir(),
      },
      log: silentLogger,
      layerUsageRefreshMs: 300,
    });
    const first = await reader.containerStats(record('a'));
    const [again, other] = await Promise.all([reader.containerStats(record('a')), reader.containerStats(record('b'))]);
    assert.deepEqual(walks, ['a', 'b'], 'one walk per container within the period');
    assert.equal(again.writableLayer.bytes, first.writableLayer.bytes);
    assert.equal(first.writableLayer.inodes, 2n, 'the upper dir and its file');
    assert.equal(other.writableLayer.inodes, 1n);

    await writeFile(join(upper('a'), 'two'), Buffer.alloc(8192, 2));
    assert.equal((await reader.containerStats(record('a'))).writableLayer.inodes, 2n, 'within the period: the last walk');
    await eventually('a new walk sees the new file', async () => (await reader.containerStats(record('a'))).writableLayer.inodes === 3n, 5000);
    assert.equal(walks.filter((id) => id === 'a').length, 2);
  });
});
