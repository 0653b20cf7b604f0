/**
 * Image volumes (KEP-4639) against a real daemon: an image from the loopback registry mounted read-only,
 * nosuid and nodev (not noexec, as cri-api v0.36 says) into a container from its unpacked layers, whole or by image_sub_path; held
 * while used; kept across a daemon restart; unmounted on removal; clear errors for what cannot be mounted.
 */
import assert from 'node:assert/strict';
import { ImageSpec, Mount, PullImageRequest } from '../../../src/gen/runtime/v1/api.js';
import { mountPoints } from '../../../src/platform/mount.js';
import { pushImage, type PushedImage } from '../../helpers/image-builder.js';
import { containerSuite, ContainerWorld, rejectsWith } from './world.js';

describe('containers: image volumes (real runc, conmon and CNI)', function () {
  this.timeout(90_000);
  const world = new ContainerWorld();
  let pod: Awaited<ReturnType<ContainerWorld['pod']>>;
  let data: PushedImage;
  let dataId: string;

  containerSuite(world, 'image volume tests', {
    scope: 'containers',
    setup: async () => {
      pod = await world.pod();
      // Two layers: the upper one replaces a file of the lower, as an image volume must show.
      data = await pushImage(world.registry, 'vol/data:1', {
        layers: [
          [
            { type: 'dir', path: 'models' },
            { path: 'models/readme.txt', content: 'from layer 1\n' },
            { path: 'models/weights.bin', content: 'w1\n' },
            { type: 'dir', path: 'models/small' },
            { path: 'models/small/config.json', content: '{"size":"small"}\n' },
            { path: 'tool.sh', content: '#!/bin/sh\necho ran\n', mode: 0o755 },
            { type: 'symlink', path: 'current', target: '/models/small' },
            { type: 'symlink', path: 'models/out', target: '../../../../..' },
          ],
          [{ path: 'models/readme.txt', content: 'from layer 2\n' }],
        ],
      });
      dataId = (await world.daemon.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image: data.reference } }))).imageRef;
    },
  });

  /** The kubelet's mount for an image volume: image.image is PullImage's image_ref. */
  const volume = (containerPath: string, imageSubPath = '', image = dataId) =>
    Mount.fromPartial({ containerPath, image: { image }, imageSubPath, readonly: true });

  const sleeper = (mounts: Mount[]) => world.config('sleeper', { mounts });

  it('mounts the image read-only, nosuid and nodev but executable, whole or by sub path, and reports it with its image_ref', async () => {
    const id = await world.run(pod, sleeper([volume('/data'), volume('/cfg', 'current'), volume('/small', 'models/small')]));
    assert.equal((await world.exec(id, ['cat', '/data/models/readme.txt'])).stdout, 'from layer 2\n');
    assert.equal((await world.exec(id, ['cat', '/cfg/config.json'])).stdout, '{"size":"small"}\n');
    assert.equal((await world.exec(id, ['ls', '/small'])).stdout, 'config.json\n');
    // Read-only, nosuid, nodev; not noexec (cri-api v0.36): a tool in the image runs, also by sub path.
    const write = await world.exec(id, ['sh', '-c', '(echo x > /data/new) 2>&1; echo $?']);
    assert.match(write.stdout, /Read-only file system/);
    assert.equal((await world.exec(id, ['/data/tool.sh'])).stdout, 'ran\n');
    for (const target of ['/data', '/small']) {
      const opts = (await world.exec(id, ['sh', '-c', `grep " ${target} " /proc/self/mountinfo`])).stdout;
      for (const o of ['ro', 'nosuid', 'nodev']) assert.match(opts, new RegExp(`[ ,]${o}[ ,]`), `${o} in ${opts}`);
      assert.doesNotMatch(opts, /noexec/, `no noexec in ${opts}`);
    }

    const st = (await world.status(id)).status!;
    const reported = st.mounts.filter((m) => m.image?.image);
    assert.equal(reported.length, 3);
    for (const m of reported) {
      assert.equal(m.image!.image, dataId);
      assert.equal(m.image!.imageRef, data.digestReference);
      assert.equal(m.readonly, true);
    }
    assert.equal(reported[2]!.imageSubPath, 'models/small');

    // Held: RemoveImage refuses while a container uses it.
    await rejectsWith(world.daemon.clients.image.removeImage({ image: ImageSpec.fromPartial({ image: dataId }) }), 'FAILED_PRECONDITION', /in use by container/);

    // A daemon restart keeps the volumes mounted and reported.
    await world.pods.restart();
    assert.equal((await world.exec(id, ['cat', '/data/models/weights.bin'])).stdout, 'w1\n');
    assert.equal((await world.status(id)).status!.mounts.filter((m) => m.image?.imageRef).length, 3);
    await rejectsWith(world.daemon.clients.image.removeImage({ image: ImageSpec.fromPartial({ image: dataId }) }), 'FAILED_PRECONDITION', /in use/);

    // Removal unmounts them and releases the image.
    const info = await world.info(id);
    await world.daemon.clients.runtime.removeContainer({ containerId: id });
    const left = [...(await mountPoints())].filter((m) => m.startsWith(info.bundle));
    assert.deepEqual(left, []);
    await world.daemon.clients.image.removeImage({ image: ImageSpec.fromPartial({ image: dataId }) });
    dataId = (await world.daemon.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image: data.reference } }))).imageRef;
  });

  it('refuses what cannot be mounted with a clear error, leaving nothing behind', async () => {
    const create = (mounts: Mount[]) => world.create(pod, sleeper(mounts));
    await rejectsWith(create([volume('/v', '', `${world.registry.host}/vol/missing:1`)]), 'NOT_FOUND', /image volume ".*vol\/missing:1" for "\/v": image not found, pull it first/);
    await rejectsWith(create([volume('/v', 'models/nope')]), 'NOT_FOUND', /image_sub_path "models\/nope" of image volume ".*" does not exist/);
    await rejectsWith(create([volume('/v', 'models/readme.txt')]), 'INVALID_ARGUMENT', /image_sub_path "models\/readme.txt" of image volume ".*" is not a directory/);
    await rejectsWith(create([volume('/v', 'models/out')]), 'INVALID_ARGUMENT', /leads outside its root/);
    await rejectsWith(create([volume('/v', '../etc')]), 'INVALID_ARGUMENT', /must not contain "\.\."/);
    await rejectsWith(create([Mount.fromPartial({ containerPath: '/v', hostPath: '/tmp', image: { image: dataId } })]), 'INVALID_ARGUMENT', /both host_path/);
    // Nothing held: the image can go.
    await world.daemon.clients.image.removeImage({ image: ImageSpec.fromPartial({ image: dataId }) });
    dataId = (await world.daemon.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image: data.reference } }))).imageRef;
  });
});
