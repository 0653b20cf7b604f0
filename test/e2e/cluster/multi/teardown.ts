/**
 * multi/down.sh's part that speaks CRI: stops and removes every pod a node's runtime still has, so the
 * runtime itself tears down their containers, mounts, netns and CNI attachments (the iptables rules of
 * the node's namespace go with the namespace).
 *
 *   node teardown.js <runtime-socket>
 */
import { existsSync } from 'node:fs';
import { criClients } from '../../../helpers/cri-client.js';

const [socket] = process.argv.slice(2);
if (!socket) {
  console.error('usage: teardown.js <runtime-socket>');
  process.exit(2);
}

if (existsSync(socket)) {
  const clients = criClients(socket);
  try {
    const { items } = await clients.runtime.listPodSandbox({ filter: undefined });
    for (const pod of items) {
      await clients.runtime.stopPodSandbox({ podSandboxId: pod.id }).catch((err: unknown) => console.error(`stop ${pod.id}: ${String(err)}`));
      await clients.runtime.removePodSandbox({ podSandboxId: pod.id }).catch((err: unknown) => console.error(`remove ${pod.id}: ${String(err)}`));
    }
    if (items.length) console.error(`teardown: removed ${items.length} pods from ${socket}`);
  } catch (err) {
    console.error(`teardown: the runtime at ${socket} did not answer: ${String(err)}`);
  } finally {
    clients.close();
  }
}
