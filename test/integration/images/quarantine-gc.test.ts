/**
 * Image garbage collection with records in quarantine: what a damaged record may reference stays,
 * everything else RemoveImage frees as usual (one damaged record must not fill the disk).
 */
import assert from 'node:assert/strict';
import { access, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pushBusyboxImage, type PushedImage } from '../../helpers/image-builder.js';
import { imageSuite } from '../../helpers/image-service.js';
import { ImageService, imageParts } from '../../../src/images/image-service.js';
import { Quarantine } from '../../../src/persist/quarantine.js';
import { createLogger } from '../../../src/common/logger.js';
import { isKind } from '../../../src/common/errors.js';

const hexOf = (digest: string) => digest.slice(digest.indexOf(':') + 1);
const exists = (path: string) => access(path).then(() => true, () => false);

describe('images: garbage collection around records in quarantine', function () {
  this.timeout(60_000);
  const env = imageSuite();
  const imagesDir = () => env.fx.options.imagesDir;
  const layerDirs = async () => new Set(await readdir(join(imagesDir(), 'layers')));
  const blobs = async () => new Set(await readdir(join(imagesDir(), 'blobs/sha256')));
  const recordPath = (image: PushedImage) => join(imagesDir(), 'records', `${hexOf(image.configDigest)}.json`);

  /** A restart with a quarantine dir, as the daemon opens the store; returns what it logged. */
  async function restartWithQuarantine(): Promise<string[]> {
    await env.fx.images.close();
    const lines: string[] = [];
    const log = createLogger('debug', (line) => void lines.push(line));
    const quarantine = new Quarantine(join(env.fx.dir, 'quarantine'), log);
    await quarantine.load();
    const options = { ...env.fx.options, quarantine, log };
    env.fx.images = await ImageService.open(options, imageParts(options));
    return lines;
  }

  /** The layer dirs (chain hex) and blobs (hex) an image's record names. */
  async function contentOf(image: PushedImage): Promise<{ layers: string[]; blobs: string[] }> {
    const record = JSON.parse(await readFile(recordPath(image), 'utf8')) as { layers: { chainId: string }[]; blobs: string[] };
    return { layers: record.layers.map((l) => hexOf(l.chainId)), blobs: record.blobs.map(hexOf) };
  }

  it('a destroyed image record keeps its layers and blobs while removing other images frees theirs', async () => {
    const damaged = await pushBusyboxImage(env.registry, 'gc/damaged:1', { extraFiles: [{ path: 'damaged', content: 'only in the damaged image\n' }] });
    const other = await pushBusyboxImage(env.registry, 'gc/other:1', { extraFiles: [{ path: 'other', content: 'only in the other image\n' }] });
    await env.fx.images.pull(damaged.reference);
    await env.fx.images.pull(other.reference);
    const kept = await contentOf(damaged);
    const freed = await contentOf(other);
    const original = await readFile(recordPath(damaged), 'utf8');
    // Nothing of the record survives: only its file name (the image ID) says what it was.
    await writeFile(recordPath(damaged), '{"id": "trunc');

    const lines = await restartWithQuarantine();
    assert.equal(env.fx.images.find(damaged.reference), undefined);
    assert.ok(lines.some((l) => l.includes('unreadable image record moved to quarantine')));
    assert.ok(lines.some((l) => l.includes('start-up sweep of unreferenced image content skipped')));
    assert.ok(!lines.some((l) => l.includes('image garbage collection skipped')), 'collection stopped altogether');

    // The other image's own layer and blobs go; the shared busybox layer and the damaged image's stay.
    await env.fx.images.remove(other.reference);
    const otherOnlyLayers = freed.layers.filter((l) => !kept.layers.includes(l));
    const otherOnlyBlobs = freed.blobs.filter((b) => !kept.blobs.includes(b));
    assert.ok(otherOnlyLayers.length === 1 && otherOnlyBlobs.length >= 2, `the other image has ${otherOnlyLayers.length} layer(s) and ${otherOnlyBlobs.length} blob(s) of its own`);
    let layers = await layerDirs();
    let stored = await blobs();
    for (const l of otherOnlyLayers) assert.ok(!layers.has(l), `layer ${l} of the removed image is still there`);
    for (const b of otherOnlyBlobs) assert.ok(!stored.has(b), `blob ${b} of the removed image is still there`);
    for (const l of kept.layers) assert.ok(layers.has(l), `layer ${l} of the damaged image was removed`);
    // Its config and layer blobs; its manifest (named by nothing left) is never a candidate.
    for (const b of kept.blobs) assert.ok(stored.has(b), `blob ${b} of the damaged image was removed`);

    // Later pulls and removals free their content too.
    const later = await pushBusyboxImage(env.registry, 'gc/later:1', { extraFiles: [{ path: 'later', content: 'later\n' }] });
    await env.fx.images.pull(later.reference);
    const laterContent = await contentOf(later);
    await env.fx.images.remove(later.reference);
    layers = await layerDirs();
    stored = await blobs();
    for (const l of laterContent.layers.filter((x) => !kept.layers.includes(x))) assert.ok(!layers.has(l), `layer ${l} of a later image is still there`);
    for (const b of laterContent.blobs.filter((x) => !kept.blobs.includes(x))) assert.ok(!stored.has(b), `blob ${b} of a later image is still there`);
    assert.deepEqual([...layers].sort(), [...kept.layers].sort());

    // The operator's repair: the record back, the entry gone, a restart: the image is whole.
    await writeFile(recordPath(damaged), original);
    await rm(join(env.fx.dir, 'quarantine'), { recursive: true, force: true });
    await env.fx.reopen();
    for (const dir of env.fx.images.getImage(damaged.reference).layerDirs) assert.ok(await exists(dir), `${dir} is gone`);
    assert.equal(await readFile(join(env.fx.images.getImage(damaged.reference).layerDirs.at(-1)!, 'damaged'), 'utf8'), 'only in the damaged image\n');
  });

  it('an image a quarantined hold names is not removed; other images are', async () => {
    const held = await pushBusyboxImage(env.registry, 'gc/held:1', { extraFiles: [{ path: 'held', content: 'held\n' }] });
    const free = await pushBusyboxImage(env.registry, 'gc/free:1', { extraFiles: [{ path: 'free', content: 'free\n' }] });
    await env.fx.images.pull(held.reference);
    await env.fx.images.pull(free.reference);
    await env.fx.images.holdImage(held.reference, 'container-1');
    const holdPath = join(imagesDir(), 'holds', 'container-1.json');
    // Cut right after the image ID: not JSON any more, but the ID is still in its bytes.
    const text = await readFile(holdPath, 'utf8');
    await writeFile(holdPath, text.slice(0, text.indexOf(hexOf(held.configDigest)) + 64));
    await restartWithQuarantine();
    assert.equal(env.fx.images.heldImage('container-1'), undefined);

    await assert.rejects(env.fx.images.remove(held.reference), (err: Error) => {
      assert.ok(isKind(err, 'FailedPrecondition'));
      assert.match(err.message, /may be in use by a container: a hold record that names it is in quarantine/);
      return true;
    });
    assert.ok(env.fx.images.find(held.reference));
    const freeLayer = (await contentOf(free)).layers.at(-1)!;
    await env.fx.images.remove(free.reference);
    assert.ok(!(await layerDirs()).has(freeLayer), 'the unheld image kept its layer');
  });
});
