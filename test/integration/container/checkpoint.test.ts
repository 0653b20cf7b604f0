/**
 * CheckpointContainer and restores, the parts that need no CRIU, against a real daemon: where archives
 * may be (INVALID_ARGUMENT), hostile archives (refused as a hostile image layer is, nothing left
 * behind), checkpoint images (checked as archives are), a node without working CRIU
 * (FAILED_PRECONDITION naming it; Status says so). The checkpoint
 * and restore themselves run in the guest (test/vm/suite/checkpoint.test.ts).
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ContainerState, ImageStatusRequest } from '../../../src/gen/runtime/v1/api.js';
import { probeCriu, type CriuSupport } from '../../../src/checkpoint/criu.js';
import { buildTar, pushImage, type LayerEntry } from '../../helpers/image-builder.js';
import { ContainerWorld, containerSuite, rejectsWith } from './world.js';

const MiB = 1024 * 1024;

describe('containers: checkpoint archives (real daemon, no CRIU needed)', function () {
  this.timeout(120_000);
  const world = new ContainerWorld();
  // Small enough for a test archive to pass, large enough for the test images' layers.
  world.pods.extraToml.push('[images]', `max_layer_size = ${8 * MiB}`);
  let criu: CriuSupport;
  containerSuite(world, 'checkpoint tests', {
    scope: 'pods',
    setup: async () => {
      criu = await probeCriu();
    },
  });

  const checkpoints = () => join(world.daemon.root, 'checkpoints');
  const sleeper = async () => {
    const pod = await world.pod();
    return { pod, id: await world.run(pod, world.config('sleeper')) };
  };
  const checkpointAt = (containerId: string, location: string) => world.daemon.clients.runtime.checkpointContainer({ containerId, location, timeout: 60n });

  /** A well-formed archive for the busybox image, with `extra` entries and rootfs-diff.tar entries. */
  async function writeArchive(name: string, extra: LayerEntry[] = [], diff?: LayerEntry[]): Promise<string> {
    const path = join(checkpoints(), name);
    await writeFile(path, buildTar([...(await archiveEntries(diff)), ...extra]));
    return path;
  }

  /** The entries of a well-formed archive for the busybox image, with rootfs-diff.tar entries. */
  async function archiveEntries(diff?: LayerEntry[]): Promise<LayerEntry[]> {
    const imageId = (await world.daemon.clients.image.imageStatus(ImageStatusRequest.fromPartial({ image: { image: world.image('busybox').reference } }))).image!.id;
    const entries: LayerEntry[] = [
      { path: 'config.dump', content: JSON.stringify({ id: 'x', name: 'n', rootfsImageRef: imageId, rootfsImageName: world.image('busybox').reference }) },
      { path: 'spec.dump', content: JSON.stringify({ process: { args: ['sleep', '3600'], env: ['PATH=/bin'], cwd: '/' } }) },
      { type: 'dir', path: 'checkpoint' },
      { path: 'checkpoint/inventory.img', content: 'not really CRIU' },
      { path: 'deleted.files', content: JSON.stringify(['/etc/hostname']) },
      { path: 'container.log', content: '2026-01-01T00:00:00.000000000Z stdout F archived\n' },
      ...(diff ? [{ path: 'rootfs-diff.tar', content: buildTar(diff) }] : []),
    ];
    return entries;
  }

  const restoreFrom = async (image: string) => {
    const pod = await world.pod();
    return world.create(pod, world.config('busybox', { image: { image } }));
  };

  it('CheckpointContainer: INVALID_ARGUMENT for a location outside the allowed directories, relative or with ".."; NOT_FOUND for an unknown container', async () => {
    const { id } = await sleeper();
    await rejectsWith(checkpointAt(id, '/tmp/stove-checkpoint.tar'), 'INVALID_ARGUMENT', /is outside the directories checkpoint archives may be in .*runtime\.checkpoint_dirs/);
    await rejectsWith(checkpointAt(id, 'c.tar'), 'INVALID_ARGUMENT', /must be an absolute path/);
    await rejectsWith(checkpointAt(id, `${checkpoints()}/../c.tar`), 'INVALID_ARGUMENT', /must not contain "\.\."/);
    await mkdir(join(checkpoints(), 'sub'));
    await rejectsWith(checkpointAt(id, join(checkpoints(), 'sub')), 'INVALID_ARGUMENT', /is a directory, not a regular file/);
    await rm(join(checkpoints(), 'sub'), { recursive: true });
    await rejectsWith(checkpointAt('0'.repeat(64), join(checkpoints(), 'c.tar')), 'NOT_FOUND', /not found/);
    assert.equal(existsSync('/tmp/stove-checkpoint.tar'), false);
  });

  it('CheckpointContainer without working CRIU: FAILED_PRECONDITION naming it, no archive, the container runs on; Status says so', async function () {
    const conditions = (await world.daemon.clients.runtime.status({ verbose: false })).status!.conditions;
    const condition = conditions.find((c) => c.type === 'StoveCanCheckpointContainers');
    assert.ok(condition, `a checkpoint condition among ${conditions.map((c) => c.type).join(', ')}`);
    assert.equal(condition.status, criu.ok);
    if (criu.ok) return this.skip();
    assert.equal(condition.reason, 'CriuUnavailable');
    assert.match(condition.message, /CRIU is not installed|criu check fails/);
    const { id } = await sleeper();
    const location = join(checkpoints(), 'c.tar');
    await rejectsWith(checkpointAt(id, location), 'FAILED_PRECONDITION', /cannot checkpoint a container: (CRIU is not installed|criu check fails)/);
    assert.deepEqual(await readdir(checkpoints()), []);
    assert.equal((await world.status(id)).status!.state, ContainerState.CONTAINER_RUNNING);
  });

  it('CreateContainer from an archive path outside the allowed directories, or missing: INVALID_ARGUMENT', async () => {
    await writeFile('/tmp/stove-hostile.tar', buildTar([{ path: 'config.dump', content: '{}' }]));
    try {
      await rejectsWith(restoreFrom('/tmp/stove-hostile.tar'), 'INVALID_ARGUMENT', /config\.image\.image "\/tmp\/stove-hostile\.tar" is outside the directories/);
    } finally {
      await rm('/tmp/stove-hostile.tar', { force: true });
    }
    await rejectsWith(restoreFrom(join(checkpoints(), 'none.tar')), 'INVALID_ARGUMENT', /no such checkpoint archive/);
  });

  const hostile: [string, () => Promise<string>, RegExp][] = [
    ['an entry climbing out with ..', () => writeArchive('dotdot.tar', [{ path: 'checkpoint/../../escape', content: 'x' }]), /refused as unsafe: entry "checkpoint\/\.\.\/\.\.\/escape" points outside/],
    ['an absolute entry', () => writeArchive('abs.tar', [{ path: '/etc/cron.d/x', content: 'x' }]), /refused as unsafe: checkpoint archive entry "\/etc\/cron\.d\/x" is an absolute path/],
    ['a symlink in the archive', () => writeArchive('symlink.tar', [{ type: 'symlink', path: 'container.log', target: '/etc/shadow' }]), /refused as unsafe: .*"container\.log" is a symlink/],
    ['a device node in the writable layer', () => writeArchive('device.tar', [], [{ type: 'char', path: 'dev-mem', major: 1, minor: 1 }]), /root filesystem diff .* refused as unsafe: .*"dev-mem" is a char device/],
    ['a file written through a symlink out of the writable layer', () => writeArchive('through.tar', [], [{ type: 'symlink', path: 'out', target: '/' }, { path: 'out/etc/shadow', content: 'x' }]), /refused as unsafe: entry "out\/etc\/shadow" would be written through the symlink "out"/],
    ['a deleted path climbing out', () => writeArchive('deleted.tar', [{ path: 'deleted.files', content: JSON.stringify(['/../../etc/passwd']) }]), /deleted\.files: "\/\.\.\/\.\.\/etc\/passwd" contains "\.\."/],
    ['spec.dump without a process', () => writeArchive('spec.tar', [{ path: 'spec.dump', content: '{}' }]), /spec\.dump has no "process"/],
  ];
  for (const [what, make, message] of hostile) {
    it(`refuses a checkpoint archive with ${what} as a hostile layer is (FAILED_PRECONDITION), leaving nothing`, async () => {
      await rejectsWith(restoreFrom(await make()), 'FAILED_PRECONDITION', message);
      assert.equal(existsSync('/escape'), false);
    });
  }

  it('refuses a checkpoint archive larger than images.max_layer_size (RESOURCE_EXHAUSTED)', async () => {
    const path = await writeArchive('large.tar', [{ path: 'checkpoint/pages-1.img', content: Buffer.alloc(9 * MiB) }]);
    await rejectsWith(restoreFrom(path), 'RESOURCE_EXHAUSTED', /checkpoint archive .* larger than 8388608 bytes uncompressed \(images\.max_layer_size\)/);
  });

  it('takes a well-formed archive through every check; without working CRIU the create is FAILED_PRECONDITION and leaves nothing', async function () {
    if (criu.ok) return this.skip();
    const path = await writeArchive('good.tar', [], [{ type: 'dir', path: 'srv' }, { path: 'srv/added', content: 'x' }]);
    await rejectsWith(restoreFrom(path), 'FAILED_PRECONDITION', /cannot restore a container from checkpoint archive \S*good\.tar: (CRIU is not installed|criu check fails)/);
  });

  // A checkpoint image (checkpoint/image.ts): the archive's files as the one layer of an OCI image.
  const CHECKPOINT_ANNOTATION = { 'io.kubernetes.cri-o.annotations.checkpoint.name': 'counter' };
  async function pushCheckpointImage(name: string, layers: LayerEntry[][]): Promise<string> {
    const image = await pushImage(world.registry, name, { layers, annotations: CHECKPOINT_ANNOTATION });
    await world.runtime.pull(image.reference);
    return image.reference;
  }

  it('takes an image whose manifest marks it as a checkpoint as one to restore; without working CRIU FAILED_PRECONDITION, leaving nothing', async function () {
    if (criu.ok) return this.skip();
    const reference = await pushCheckpointImage('ckpt/good:1', [await archiveEntries([{ type: 'dir', path: 'srv' }, { path: 'srv/added', content: 'x' }])]);
    await rejectsWith(restoreFrom(reference), 'FAILED_PRECONDITION', /cannot restore a container from checkpoint image "[^"]*ckpt\/good:1": (CRIU is not installed|criu check fails)/);
    assert.deepEqual((await world.daemon.clients.runtime.listContainers({ filter: undefined })).containers, []);
  });

  it('checks a checkpoint image as an archive is: a symlink its layer may hold is refused, as are two layers', async () => {
    const linked = await pushCheckpointImage('ckpt/linked:1', [[...(await archiveEntries()).filter((e) => e.path !== 'container.log'), { type: 'symlink', path: 'container.log', target: '/etc/shadow' }]]);
    await rejectsWith(restoreFrom(linked), 'FAILED_PRECONDITION', /refused as unsafe: .*"container\.log" is a symlink/);
    const two = await pushCheckpointImage('ckpt/two:1', [await archiveEntries(), [{ path: 'extra', content: 'x' }]]);
    await rejectsWith(restoreFrom(two), 'FAILED_PRECONDITION', /checkpoint image "[^"]*ckpt\/two:1" has 2 layers: a checkpoint image holds the archive's files in exactly one/);
    assert.deepEqual((await world.daemon.clients.runtime.listContainers({ filter: undefined })).containers, []);
  });
});
