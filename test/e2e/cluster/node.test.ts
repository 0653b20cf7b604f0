/** The node as the kubelet reports it on Stove: Ready, the runtime's name and version, network readiness. */
import { strict as assert } from 'node:assert';
import { readFile, rename } from 'node:fs/promises';
import { CNI_CONF, NODE_IP, NODE_NAME, getJson, kubectl, waitFor } from './kube.js';

interface NodeJson {
  status: {
    conditions: { type: string; status: string; reason?: string; message?: string }[];
    nodeInfo: { containerRuntimeVersion: string; kubeletVersion: string };
    addresses: { type: string; address: string }[];
  };
  spec: { podCIDR?: string };
}

const readyCondition = async () => (await getJson<NodeJson>(['node', NODE_NAME])).status.conditions.find((c) => c.type === 'Ready')!;

describe('cluster: the node', function () {
  this.timeout(180_000);

  it('is Ready with stove://<version> as its runtime, its own address and a pod CIDR', async () => {
    const node = await getJson<NodeJson>(['node', NODE_NAME]);
    assert.equal(node.status.conditions.find((c) => c.type === 'Ready')?.status, 'True');
    const version = JSON.parse(await readFile(new URL('../../../../package.json', import.meta.url), 'utf8')) as { version: string };
    assert.equal(node.status.nodeInfo.containerRuntimeVersion, `stove://${version.version}`);
    assert.match(node.status.nodeInfo.kubeletVersion, /^v1\.36\./);
    assert.ok(node.status.addresses.some((a) => a.type === 'InternalIP' && a.address === NODE_IP));
    assert.equal(node.spec.podCIDR, '10.244.0.0/24');
    const wide = await kubectl(['get', 'nodes', '-o', 'wide']);
    assert.match(wide, new RegExp(`${NODE_NAME}\\s+Ready.*stove://${version.version.replace(/\./g, '\\.')}`));
  });

  it('goes NotReady (network not ready) without a CNI config and Ready again when it is back', async () => {
    const aside = `${CNI_CONF}.aside`;
    await rename(CNI_CONF, aside);
    try {
      const notReady = await waitFor('the node NotReady', 90_000, async () => {
        const c = await readyCondition();
        return c.status === 'False' ? c : undefined;
      });
      assert.match(notReady.message ?? '', /network/i);
    } finally {
      await rename(aside, CNI_CONF);
    }
    await waitFor('the node Ready again', 90_000, async () => (await readyCondition()).status === 'True');
  });
});
