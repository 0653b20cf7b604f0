/**
 * Item 6 of the hardening: nothing is destroyed because Stove could not read it. Pod, container, image
 * and layer records are corrupted while the daemon is SIGKILLed with live containers; at restart each
 * goes to <root>/quarantine (logged, in verbose Status and in `stove check`) and what it described is
 * left alone: the pod's pause process, netns and IP, the container's processes, mount and writable
 * layer, the image's layers. Repaired and moved back, everything is managed again. A failed atomic
 * write (ENOSPC) leaves no temp file.
 */
import assert from 'node:assert/strict';
import { access, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ContainerState, PodSandboxState } from '../../src/gen/runtime/v1/api.js';
import { mount, mountPoints, unmount } from '../../src/platform/mount.js';
import { writeFileAtomic } from '../../src/persist/atomic-file.js';
import { pushBusyboxImage } from '../helpers/image-builder.js';
import { runStoveCli, startStove } from '../helpers/stove-process.js';
import { containerSuite, ContainerWorld, pidAlive } from '../integration/container/world.js';

const exists = (p: string) => access(p).then(() => true, () => false);
const hexOf = (digest: string) => digest.slice(digest.indexOf(':') + 1);

describe('security: nothing is destroyed because Stove could not read it (real daemon, runc, conmon, CNI)', function () {
  this.timeout(120_000);
  const world = new ContainerWorld();

  containerSuite(world, 'quarantine tests', {
    scope: 'pods',
    setup: async () => {
      // An image of its own, so its layers are no other image's.
      const pushed = await pushBusyboxImage(world.registry, 'security/held:1', {
        cmd: ['sleep', '3600'],
        extraFiles: [{ path: 'held.txt', content: 'only in this image\n' }],
      });
      world.images.set('held', pushed);
      await world.runtime.pull(pushed.reference);
    },
  });

  async function restart(): Promise<void> {
    world.pods.daemon = await startStove({ dir: world.daemon.dir, configToml: world.pods.configToml() });
  }

  it('quarantines corrupted pod, container, image and layer records across a SIGKILL restart and touches nothing they describe', async () => {
    const { root, state } = world.daemon;
    // Pod A: its record is corrupted; its container A1 keeps a good record.
    const podA = await world.pod();
    const a1 = await world.run(podA, world.config('sleeper'));
    // Pod B: its container B1's record is corrupted, as are its image's record and its top layer's.
    const podB = await world.pod();
    const b1 = await world.run(podB, world.config('held'));
    const podAInfo = await world.pods.info(podA.id);
    const podAIp = (await world.pods.status(podA.id)).status!.network!.ip;
    const [a1Pid, b1Pid] = [(await world.info(a1)).pid, (await world.info(b1)).pid];
    const imageRecordPath = join(root, 'images', 'records', `${hexOf(world.image('held').configDigest)}.json`);
    const layerHexes = (JSON.parse(await readFile(imageRecordPath, 'utf8')) as { layers: { chainId: string }[] }).layers.map((l) => hexOf(l.chainId));
    const records: Record<string, { path: string; id: string }> = {
      sandbox: { path: join(root, 'sandboxes', podA.id, 'sandbox.json'), id: podA.id },
      container: { path: join(root, 'containers', b1, 'container.json'), id: b1 },
      image: { path: imageRecordPath, id: hexOf(world.image('held').configDigest) },
      layer: { path: join(root, 'images', 'layers', layerHexes.at(-1)!, 'layer.json'), id: layerHexes.at(-1)! },
    };
    const originals = new Map<string, string>();
    for (const { path } of Object.values(records)) originals.set(path, await readFile(path, 'utf8'));

    await world.daemon.stop('SIGKILL');
    for (const { path } of Object.values(records)) await writeFile(path, '{"id": "trunc');
    await restart();
    try {
      // What the records described is untouched.
      for (const [what, pid] of [['pause process of the pod', podAInfo.pid], ['container in the pod', a1Pid], ['container', b1Pid]] as const)
        assert.ok(await pidAlive(pid), `${what} (pid ${pid}) was killed`);
      assert.ok(await exists(podAInfo.netnsPath), 'the pod netns pin is gone');
      assert.ok((await world.pods.net.reservedIps()).includes(podAIp), `the pod IP ${podAIp} was released`);
      assert.ok((await mountPoints()).has(join(state, 'containers', b1, 'rootfs')), 'the container root filesystem was unmounted');
      assert.ok(await exists(join(root, 'containers', b1, 'fs', 'upper')), 'the writable layer is gone');
      for (const hex of layerHexes) assert.ok(await exists(join(root, 'images', 'layers', hex, 'diff')), `layer ${hex} was removed`);
      assert.equal((await world.status(a1)).status!.state, ContainerState.CONTAINER_RUNNING);

      // Each record is in quarantine, logged, in verbose Status and in `stove check`.
      const entries = (await readdir(join(root, 'quarantine'))).filter((n) => !n.endsWith('.why'));
      assert.deepEqual(entries.map((n) => n.split('.').slice(0, 2).join('.')).sort(), Object.entries(records).map(([k, r]) => `${k}.${r.id}`).sort());
      for (const [kind, { id }] of Object.entries(records)) {
        assert.match(world.daemon.output(), new RegExp(`unreadable ${kind} record moved to quarantine.*${id}`), kind);
        assert.ok(!(await exists(records[kind]!.path)), `${kind} record still in place`);
      }
      const status = await world.daemon.clients.runtime.status({ verbose: true });
      const listed = JSON.parse(status.info.quarantine!) as { kind: string; id: string; from: string }[];
      assert.deepEqual(listed.map((e) => `${e.kind}.${e.id}`).sort(), entries.map((n) => n.split('.').slice(0, 2).join('.')).sort());
      assert.ok(listed.every((e) => e.from === records[e.kind]!.path));
      const check = await runStoveCli(['check', '--config', world.daemon.configPath, '--root', root, '--state', state]);
      assert.match(check.stdout, /fail\s+quarantine\s+4 unreadable record\(s\)/);
      assert.equal(check.code, 1);
      for (const { id } of Object.values(records)) assert.ok(check.stdout.includes(id), `stove check does not name ${id}`);
      const condition = status.status!.conditions.find((c) => c.type === 'StoveHasNoRecordsInQuarantine');
      assert.equal(condition?.status, false);
      assert.equal(condition.reason, 'RecordsInQuarantine');
      assert.match(condition.message, /^4 unreadable record\(s\) in quarantine \(/);
      for (const { id } of Object.values(records)) assert.ok(condition.message.includes(id), `the condition does not name ${id}`);
      assert.equal(status.status!.conditions.find((c) => c.type === 'RuntimeReady')?.status, true);
      // Collection goes on around them; only the sweep of content no readable record explains waits.
      assert.match(world.daemon.output(), /start-up sweep of unreferenced image content skipped.*2 image, layer or hold record\(s\) in quarantine/);
      assert.doesNotMatch(world.daemon.output(), /image garbage collection skipped/);
    } finally {
      // The operator's repair: records back in place, entries deleted, a restart.
      await world.daemon.stop('SIGKILL');
      for (const [path, text] of originals) await writeFile(path, text);
      await rm(join(root, 'quarantine'), { recursive: true, force: true });
      await restart();
    }
    assert.equal((await world.pods.status(podA.id)).status!.state, PodSandboxState.SANDBOX_READY);
    assert.equal((await world.status(b1)).status!.state, ContainerState.CONTAINER_RUNNING);
    assert.equal((await world.exec(b1, ['cat', '/held.txt'])).stdout, 'only in this image\n');
  });

  it('leaves no temp file and the old content when an atomic write fails (ENOSPC)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'stove-enospc-'));
    await mount({ type: 'tmpfs', source: 'tmpfs', target: dir, options: ['size=64k'] });
    try {
      await mkdir(join(dir, 'records'));
      const path = join(dir, 'records', 'record.json');
      await writeFileAtomic(path, 'old\n');
      await assert.rejects(writeFileAtomic(path, Buffer.alloc(256 * 1024, 'x')), { code: 'ENOSPC' });
      assert.deepEqual(await readdir(join(dir, 'records')), ['record.json']);
      assert.equal(await readFile(path, 'utf8'), 'old\n');
    } finally {
      await unmount(dir, true).catch(() => {});
      await rm(dir, { recursive: true, force: true });
    }
  });
});
