/**
 * CheckpointContainer and restores with a real CRIU (the guest's 3.17, whose `criu check` passes on
 * its 6.1 kernel): a counting process checkpointed while it runs and restored into a new pod counts on
 * from where it was; a writable layer with files written and deleted comes back as it was; a
 * listening TCP socket is restored and answers in the new pod; a checkpoint image (the archive as an
 * OCI image's one layer) pulled from a registry restores as the archive does; crictl (cri-tools v1.36, when
 * test/vm/run.sh --crictl put one in the guest) checkpoints with --export and restores as CRI-O's own
 * tests do it; checkpointctl (--checkpointctl) reads the archives. Skipped where CRIU does not work.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { NamespaceMode, type ContainerConfig, type DeepPartial, type PodSandboxConfig } from '../../../src/gen/runtime/v1/api.js';
import { probeCriu } from '../../../src/checkpoint/criu.js';
import { cgroupDirs, detectCgroups } from '../../../src/platform/cgroups.js';
import { compressLayer, pushBusyboxImage, pushImage, type PushedImage } from '../../helpers/image-builder.js';
import { ContainerWorld, skipReason as containerSkipReason } from '../../integration/container/world.js';
import { suiteHooks } from '../../helpers/suite.js';
import { waitFor } from '../../helpers/wait.js';

async function skipReason(): Promise<string | undefined> {
  const criu = await probeCriu();
  if (!criu.ok) return `needs a node where CRIU works (test/vm/run.sh boots one): ${criu.message}`;
  return containerSkipReason();
}

/** The kubelet's default: a PID namespace of the container's own. */
const OWN_PID_NS = { linux: { securityContext: { namespaceOptions: { pid: NamespaceMode.CONTAINER } } } } as const;

describe('checkpoint and restore with CRIU (guest)', function () {
  this.timeout(600_000);
  const world = new ContainerWorld();
  let layered: PushedImage;

  // Before the suite's own hooks, so that a failure shows what the daemon and CRIU said before the tidy.
  afterEach(async function () {
    if (this.currentTest?.state !== 'failed') return;
    console.log(`      failed: ${this.currentTest.err?.message}`);
    const lines = world.daemon.output().split('\n').filter((l) => /"level":"(error|warn)"|restor|checkpoint/i.test(l));
    console.log(lines.slice(-30).join('\n'));
    const logs = await execa('sh', ['-c', `tail -n 15 ${world.daemon.state}/containers/*/restore.log 2>/dev/null`], { reject: false });
    if (logs.stdout) console.log(logs.stdout);
  });

  suiteHooks({
    what: 'checkpoint tests',
    skipReason,
    setup: async () => {
      await world.start();
      layered = await pushBusyboxImage(world.registry, 'ctr/ckpt-layer:1', {
        cmd: ['sleep', '3600'],
        extraFiles: [
          { type: 'dir', path: 'srv' },
          { path: 'srv/old', content: 'from the image\n' },
          { type: 'dir', path: 'srv/dir' },
          { path: 'srv/dir/a', content: 'a\n' },
          { path: 'srv/index.html', content: 'served\n' },
        ],
      });
      await world.runtime.pull(layered.reference);
    },
    tidy: () => world.removeAll().catch(() => {}),
    leftovers: () => world.leftovers(),
    cleanup: () => world.cleanup(),
  });

  const archive = (name: string) => join(world.daemon.root, 'checkpoints', name);
  const logOf = (pod: { config: PodSandboxConfig }, config: ContainerConfig) => join(pod.config.logDirectory, config.logPath);
  const numbers = async (path: string) => (await world.logLines(path)).map((l) => l.text).filter((t) => /^\d+$/.test(t)).map(Number);

  /** A CRI call that must answer within `ms`. */
  async function bounded<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms)));
    try {
      return await Promise.race([p, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  async function checkpoint(id: string, location: string): Promise<number> {
    const started = Date.now();
    await bounded(world.daemon.clients.runtime.checkpointContainer({ containerId: id, location, timeout: 240n }), 300_000, `CheckpointContainer of ${id}`);
    const ms = Date.now() - started;
    console.log(`      checkpoint of ${id.slice(0, 12)} took ${ms} ms`);
    return ms;
  }

  /**
   * What checkpointctl (test/vm/run.sh --checkpointctl) reads of an archive: the container, its image,
   * the engine it takes the archive for (containerd's layout), and CRIU's images (the process tree, the
   * memory pages). Nothing when the guest has no checkpointctl.
   */
  async function readWithCheckpointctl(location: string, expected: { id: string; name: string; image: string; command: string }): Promise<void> {
    const bin = process.env.STOVE_VM_CHECKPOINTCTL;
    if (!bin) return console.log('      (no checkpointctl in the guest: test/vm/run.sh --checkpointctl FILE)');
    const show = await execa(bin, ['show', location]);
    assert.match(show.stdout, new RegExp(expected.id.slice(0, 12)), `checkpointctl show names the container:\n${show.stdout}`);
    const [node, ...more] = JSON.parse((await execa(bin, ['inspect', location, '--format', 'json', '--ps-tree', '--stats'])).stdout) as {
      id: string;
      container_name: string;
      image: string;
      engine: string;
      checkpoint_size: { memory_pages_size?: number };
      process_tree?: { command: string };
    }[];
    assert.deepEqual(more, []);
    assert.equal(node!.id, expected.id);
    assert.equal(node!.container_name, expected.name);
    assert.equal(node!.image, expected.image);
    assert.equal(node!.engine, 'containerd');
    assert.equal(node!.process_tree?.command, expected.command);
    assert.ok((node!.checkpoint_size.memory_pages_size ?? 0) > 0, 'the memory pages are there');
    console.log(`      checkpointctl: ${node!.container_name} (${node!.engine}) on ${node!.image}, ${node!.checkpoint_size.memory_pages_size} bytes of pages`);
  }

  /** Creates a container from `location` in a new pod and starts it; returns pod, config and ID. */
  async function restore(location: string, name: string, c: DeepPartial<ContainerConfig> = {}) {
    const pod = await world.pod();
    const config = world.config('busybox', { metadata: { name, attempt: 0 }, ...OWN_PID_NS, ...c, image: { image: location } });
    const started = Date.now();
    const id = await bounded(world.create(pod, config), 300_000, `CreateContainer from ${location}`);
    const created = Date.now();
    await bounded(world.daemon.clients.runtime.startContainer({ containerId: id }), 300_000, `StartContainer (the restore) of ${name}`);
    console.log(`      restore of ${name}: create ${created - started} ms, start ${Date.now() - created} ms`);
    return { pod, config, id };
  }

  it('checkpoints a counting process that keeps running, and its restore in a new pod counts on from there', async () => {
    const pod = await world.pod();
    const config = world.config('busybox', {
      command: ['sh', '-c', 'i=0; while true; do echo $i; i=$((i+1)); sleep 0.3; done'],
      ...OWN_PID_NS,
    });
    const id = await world.run(pod, config);
    const log = logOf(pod, config);
    await waitFor('the counter to reach 5', async () => ((await numbers(log)).length >= 5 ? true : undefined), 60_000);

    const location = archive('counter.tar');
    await checkpoint(id, location);
    const entries = (await execa('tar', ['-tf', location])).stdout.split('\n');
    for (const name of ['config.dump', 'spec.dump', 'status', 'checkpoint/inventory.img', 'rootfs-diff.tar', 'deleted.files', 'container.log', 'dump.log']) {
      assert.ok(entries.includes(name), `the archive holds ${name} (it holds ${entries.filter((e) => !e.startsWith('checkpoint/')).join(' ')})`);
    }
    const configDump = JSON.parse((await execa('tar', ['-xOf', location, 'config.dump'])).stdout) as Record<string, unknown>;
    assert.equal(configDump['id'], id);
    assert.equal(configDump['rootfsImageRef'], (await world.status(id)).status!.imageId);
    await readWithCheckpointctl(location, { id, name: config.metadata!.name, image: world.image('busybox').reference, command: 'sh' });
    const archived = (await execa('tar', ['-xOf', location, 'container.log'])).stdout.split('\n').map((l) => l.split(' ').slice(3).join(' ')).filter((t) => /^\d+$/.test(t)).map(Number);
    const last = archived[archived.length - 1]!;
    console.log(`      archived log ends at ${last} (${archived.length} lines)`);

    // The original goes on.
    await waitFor('the original to count past the checkpoint', async () => ((await numbers(log)).at(-1)! > last + 3 ? true : undefined), 60_000);
    assert.equal((await world.status(id)).status!.state, 1 /* CONTAINER_RUNNING */);

    const restored = await restore(location, 'counter');
    const restoredLog = logOf(restored.pod, restored.config);
    await waitFor('the restored counter to count', async () => ((await numbers(restoredLog)).length >= archived.length + 3 ? true : undefined), 120_000);
    const all = await numbers(restoredLog);
    assert.deepEqual(all.slice(0, archived.length), archived, 'the restored log starts with the archived one');
    const fresh = all.slice(archived.length);
    console.log(`      restored counter goes on with ${fresh.slice(0, 5).join(' ')}`);
    // Lines in the pipe to the old conmon when the dump was taken may not reach the new log.
    assert.ok(fresh[0]! > last && fresh[0]! <= last + 3, `the restored process counts on from ${last}, not from 0 (${fresh.slice(0, 5).join(' ')})`);
    for (let i = 1; i < fresh.length; i++) assert.equal(fresh[i], fresh[i - 1]! + 1, 'it counts on one by one');

    const info = await world.info(restored.id);
    assert.equal((info as unknown as { restored: boolean }).restored, true);
    const status = (await world.status(restored.id)).status!;
    assert.equal(status.state, 1 /* CONTAINER_RUNNING */);
    assert.equal(status.imageRef, (await world.status(id)).status!.imageRef);
    // The two counters are different processes in different pods, each in its own container's cgroup.
    const original = await world.info(id);
    assert.notEqual(info.pid, original.pid);
    const cgroups = await detectCgroups();
    for (const c of [info, original]) {
      const line = (await readFile(`/proc/${c.pid}/cgroup`, 'utf8')).trim();
      assert.equal(join('/sys/fs/cgroup', line.replace(/^0::/, '')), cgroupDirs(cgroups, c.cgroupsPath).unified, `pid ${c.pid} is in its container's cgroup (${c.cgroupsPath})`);
    }
    // So the original goes first, and the restored one counts on without it.
    await world.daemon.clients.runtime.removeContainer({ containerId: id });
    const counted = (await numbers(restoredLog)).length;
    await waitFor('the restored counter to count on alone', async () => ((await numbers(restoredLog)).length >= counted + 3 ? true : undefined), 60_000);
    await world.daemon.clients.runtime.removeContainer({ containerId: restored.id });
  });

  /** Removes a restored container, then its original (either order works: each has its own cgroup). */
  async function removeRestoredFirst(restoredId: string, originalId: string): Promise<void> {
    for (const c of [restoredId, originalId]) await world.daemon.clients.runtime.removeContainer({ containerId: c });
  }

  it('restores the writable layer: files written and deleted, an opaque directory, a symlink', async () => {
    const pod = await world.pod();
    const script = 'rm /srv/old && rm -rf /srv/dir && mkdir /srv/dir && echo b > /srv/dir/b && echo new > /srv/added && ln -s dir/b /srv/link && mkdir -p /var/lib/app && echo state > /var/lib/app/f && echo ready && exec sleep 3600';
    const config = world.config('busybox', { image: { image: layered.reference }, command: ['sh', '-c', script], ...OWN_PID_NS });
    const id = await world.run(pod, config);
    await waitFor('the writes', async () => ((await world.logLines(logOf(pod, config))).some((l) => l.text === 'ready') ? true : undefined), 60_000);
    const tree = async (cid: string) => (await world.exec(cid, ['sh', '-c', 'cd / && find srv var/lib/app | sort && cat srv/dir/b srv/added var/lib/app/f && readlink srv/link'])).stdout;
    const before = await tree(id);

    const location = archive('layer.tar');
    await checkpoint(id, location);
    const deleted = JSON.parse((await execa('tar', ['-xOf', location, 'deleted.files'])).stdout) as string[];
    assert.deepEqual(deleted.sort(), ['/srv/dir', '/srv/old']);

    const restored = await restore(location, 'layer');
    assert.equal(await tree(restored.id), before);
    assert.doesNotMatch(before, /srv\/old|srv\/dir\/a/);
    await removeRestoredFirst(restored.id, id);
  });

  it('restores a listening TCP socket, which answers in the new pod', async () => {
    const pod = await world.pod();
    const config = world.config('busybox', { image: { image: layered.reference }, command: ['httpd', '-f', '-p', '8080', '-h', '/srv'], ...OWN_PID_NS });
    const id = await world.run(pod, config);
    const get = async (cid: string) => (await world.exec(cid, ['wget', '-q', '-O', '-', 'http://127.0.0.1:8080/index.html'])).stdout;
    await waitFor('httpd to listen', async () => ((await get(id).catch(() => '')) === 'served\n' ? true : undefined), 60_000);

    const location = archive('httpd.tar');
    await checkpoint(id, location);
    const restored = await restore(location, 'httpd');
    assert.equal(await get(restored.id), 'served\n');
    assert.equal(await get(id), 'served\n', 'the original still serves');
    await removeRestoredFirst(restored.id, id);
  });

  it('restores from a checkpoint image (the archive as the one layer of an OCI image, pulled from a registry), as a kubelet would', async () => {
    const pod = await world.pod();
    const config = world.config('busybox', { command: ['sh', '-c', 'i=0; while true; do echo $i; i=$((i+1)); sleep 0.3; done'], ...OWN_PID_NS });
    const id = await world.run(pod, config);
    await waitFor('the counter to reach 5', async () => ((await numbers(logOf(pod, config))).length >= 5 ? true : undefined), 60_000);
    const location = archive('for-image.tar');
    await checkpoint(id, location);
    const archived = (await execa('tar', ['-xOf', location, 'container.log'])).stdout.split('\n').map((l) => l.split(' ').slice(3).join(' ')).filter((t) => /^\d+$/.test(t)).map(Number);

    // What `buildah add` of the archive and checkpointctl's annotation make: the archive's files as one layer.
    const image = await pushImage(world.registry, 'ckpt/counter-image:1', {
      layers: [compressLayer(await readFile(location), 'gzip')],
      annotations: { 'org.criu.checkpoint.container.name': 'counter' },
    });
    await world.runtime.pull(image.reference);
    const restored = await restore(image.reference, 'counter-image');
    const restoredLog = logOf(restored.pod, restored.config);
    await waitFor('the restored counter to count', async () => ((await numbers(restoredLog)).length >= archived.length + 3 ? true : undefined), 120_000);
    const fresh = (await numbers(restoredLog)).slice(archived.length);
    assert.ok(fresh[0]! > archived.at(-1)! && fresh[0]! <= archived.at(-1)! + 3, `counts on from ${archived.at(-1)} (${fresh.slice(0, 5).join(' ')})`);
    const verbose = await world.info(restored.id) as unknown as { restored: boolean; restoredFrom: string };
    assert.equal(verbose.restored, true);
    assert.equal(verbose.restoredFrom, image.reference);
    await removeRestoredFirst(restored.id, id);
  });

  it('crictl checkpoint --export writes an archive that crictl create and start restore in a new pod', async function () {
    const crictl = process.env.STOVE_VM_CRICTL;
    if (!crictl) {
      console.log('      skipped: no crictl in the guest (test/vm/run.sh --crictl FILE; make test-vm builds cri-tools with test/e2e/critest.sh)');
      this.skip();
    }
    const endpoint = `unix://${world.daemon.socket}`;
    // crictl's --timeout bounds each CRI call (2 s by default); a checkpoint under emulation takes longer.
    const cli = async (...args: string[]) => (await execa(crictl, ['--runtime-endpoint', endpoint, '--image-endpoint', endpoint, '--timeout', '300s', ...args])).stdout.trim();
    const files = join(world.daemon.dir, 'crictl');
    await mkdir(files, { recursive: true });
    // crictl reads the CRI's Go structs from JSON: snake_case names, enums as numbers (1: CONTAINER).
    const ownPidNs = { security_context: { namespace_options: { pid: 1 } } };
    const podFile = async (name: string) => {
      const file = join(files, `${name}.json`);
      const logDir = join(files, `${name}-logs`);
      await writeFile(file, JSON.stringify({ metadata: { name, namespace: 'crictl', uid: randomBytes(8).toString('hex'), attempt: 0 }, log_directory: logDir, linux: {} }));
      return { file, log: join(logDir, 'counter.log') };
    };
    const containerFile = async (name: string, image: string) => {
      const file = join(files, `${name}.json`);
      const command = ['sh', '-c', 'i=0; while true; do echo $i; i=$((i+1)); sleep 0.3; done'];
      await writeFile(file, JSON.stringify({ metadata: { name: 'counter' }, image: { image }, command, log_path: 'counter.log', linux: ownPidNs }));
      return file;
    };

    const first = await podFile('crictl-first');
    const podId = await cli('runp', first.file);
    const ctrId = await cli('create', podId, await containerFile('counter', world.image('busybox').reference), first.file);
    await cli('start', ctrId);
    await waitFor('the counter to reach 5', async () => ((await numbers(first.log)).length >= 5 ? true : undefined), 60_000);

    const location = archive('crictl.tar');
    const started = Date.now();
    assert.equal(await cli('checkpoint', `--export=${location}`, ctrId), ctrId);
    console.log(`      crictl checkpoint took ${Date.now() - started} ms`);
    const archived = (await execa('tar', ['-xOf', location, 'container.log'])).stdout.split('\n').map((l) => l.split(' ').slice(3).join(' ')).filter((t) => /^\d+$/.test(t)).map(Number);
    const last = archived.at(-1)!;
    // As CRI-O's tests do: the original pod is gone before its container comes back in another.
    await cli('rmp', '-f', podId);

    const second = await podFile('crictl-second');
    const podId2 = await cli('runp', second.file);
    const restoredId = await cli('create', podId2, await containerFile('counter-restore', location), second.file);
    await cli('start', restoredId);
    const inspected = JSON.parse(await cli('inspect', restoredId)) as { status: { state: string }; info: { restored?: boolean } };
    assert.equal(inspected.status.state, 'CONTAINER_RUNNING');
    assert.equal(inspected.info.restored, true, 'crictl inspect says it was restored');
    await waitFor('the restored counter to count', async () => ((await numbers(second.log)).length >= archived.length + 3 ? true : undefined), 120_000);
    const fresh = (await numbers(second.log)).slice(archived.length);
    assert.ok(fresh[0]! > last && fresh[0]! <= last + 3, `the restored process counts on from ${last} (${fresh.slice(0, 5).join(' ')})`);
    await cli('rmp', '-f', podId2);
    assert.equal(await cli('ps', '-a', '-q'), '', 'crictl rmp -f removed both pods and their containers');
  });
});
