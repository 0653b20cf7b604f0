/**
 * down.sh's part that speaks CRI and iptables: stops and removes every pod the runtime still has (so
 * the runtime itself tears down their containers, mounts, netns and CNI attachments), then deletes the
 * iptables rules and per-pod CNI chains that still name the cluster's pod range.
 *
 *   node teardown.js <runtime-socket|-> <marker>...
 */
import { existsSync } from 'node:fs';
import { criClients } from '../../helpers/cri-client.js';
import { purgeIptables } from '../../integration/network/host-net.js';

const [socket, ...markers] = process.argv.slice(2);
if (!socket || markers.length === 0) {
  console.error('usage: teardown.js <runtime-socket|-> <marker>...');
  process.exit(2);
}

async function removePods(path: string): Promise<void> {
  const clients = criClients(path);
  try {
    const { items } = await clients.runtime.listPodSandbox({ filter: undefined });
    for (const pod of items) {
      await clients.runtime.stopPodSandbox({ podSandboxId: pod.id }).catch((err: unknown) => console.error(`stop ${pod.id}: ${String(err)}`));
      await clients.runtime.removePodSandbox({ podSandboxId: pod.id }).catch((err: unknown) => console.error(`remove ${pod.id}: ${String(err)}`));
    }
    if (items.length) console.error(`teardown: removed ${items.length} pods`);
  } finally {
    clients.close();
  }
}

if (socket !== '-' && existsSync(socket)) await removePods(socket).catch((err: unknown) => console.error(`teardown: the runtime did not answer: ${String(err)}`));
const purged = await purgeIptables(markers);
if (purged) console.error(`teardown: removed ${purged} iptables rules naming ${markers.join(', ')}`);
