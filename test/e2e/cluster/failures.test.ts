/** A failing CNI plugin as the kubelet reports it: an event carrying Stove's error, then recovery. */
import { strict as assert } from 'node:assert';
import { readFile, writeFile } from 'node:fs/promises';
import { CNI_CONF, apply, busyboxPod, kubectl, suiteNamespace, waitFor, waitPodReady } from './kube.js';

describe('cluster: a failing CNI plugin', function () {
  this.timeout(240_000);
  const ns = suiteNamespace('e2e-failures');

  it('gives FailedCreatePodSandBox with the runtime\'s error, and the pod starts once CNI works', async () => {
    const good = await readFile(CNI_CONF, 'utf8');
    const broken = JSON.parse(good) as { plugins: { type: string }[] };
    broken.plugins.splice(1, 0, { type: 'e2e-missing-plugin' });
    await writeFile(CNI_CONF, JSON.stringify(broken));
    try {
      await apply(busyboxPod(ns.name, 'unlucky', 'exec sleep 3600'));
      const message = await waitFor('a FailedCreatePodSandBox event', 120_000, async () => {
        const out = await kubectl(['-n', ns.name, 'get', 'events', '--field-selector', 'reason=FailedCreatePodSandBox', '-o', 'jsonpath={.items[*].message}']);
        return out || undefined;
      });
      assert.match(message, /e2e-missing-plugin/);
      assert.match(message, /Failed to create pod sandbox: rpc error: code = \w+ desc = /);
    } finally {
      await writeFile(CNI_CONF, good);
    }
    await waitPodReady(ns.name, 'unlucky', 180_000);
  });
});
