/**
 * The kubelet's image GC on Stove: unused images go, the image Stove's config pins stays. up.sh sets the
 * kubelet's thresholds to the bottom, so each periodic GC run (every 5 minutes from the kubelet's start;
 * the one at its start knows no image old enough) frees every unused image. setup.ts pulls both images
 * at the start and make test-cluster runs this file after the suites that leave the kubelet running, so
 * the first periodic run is near.
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { criClients } from '../../helpers/cri-client.js';
import { CLUSTER_DIR, NODE_NAME, getJson, image, waitFor } from './kube.js';

interface NodeImages {
  status: { images?: { names?: string[] }[] };
}
const nodeImageNames = async () => (await getJson<NodeImages>(['node', NODE_NAME])).status.images?.flatMap((i) => i.names ?? []) ?? [];

describe("cluster: the kubelet's image GC", function () {
  this.timeout(420_000);

  it('removes an unused image and leaves the pinned one', async () => {
    // setup.ts pulled both through the CRI at the start, as an operator's crictl pull does.
    const cri = criClients(join(CLUSTER_DIR, 'stove/stove.sock'));
    try {
      const listed = (await cri.image.listImages({ filter: undefined })).images;
      assert.equal(listed.find((i) => i.repoTags.includes(image('PINNED_IMAGE')))?.pinned, true, 'Stove reports the configured image pinned');
    } finally {
      cri.close();
    }
    await waitFor('both images in the node status', 60_000, async () => {
      const names = await nodeImageNames();
      return names.includes(image('PINNED_IMAGE')) && names.includes(image('UNUSED_IMAGE'));
    });
    await waitFor("the unused image collected by the kubelet's next GC run", 330_000, async () => !(await nodeImageNames()).includes(image('UNUSED_IMAGE')));
    assert.ok((await nodeImageNames()).includes(image('PINNED_IMAGE')), 'the pinned image was collected');
  });
});
