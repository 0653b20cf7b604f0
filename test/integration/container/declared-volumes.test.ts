/**
 * The image's declared VOLUMEs against a real daemon (runc, conmon, images from the loopback registry),
 * in each `runtime.image_volumes` mode: `copy` (the default, containerd's) gives each container a
 * writable copy of the image's content there, even under a read-only root filesystem, separate per
 * container, counted in its writable layer and removed with it; a CRI mount at the same path wins;
 * hostile VOLUME paths are refused with FAILED_PRECONDITION and leave nothing; `mkdir` (CRI-O's) makes
 * the directory in the root filesystem, `ignore` does nothing.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Mount, NamespaceMode, SecurityProfile_ProfileType } from '../../../src/gen/runtime/v1/api.js';
import { pushBusyboxImage, type LayerEntry } from '../../helpers/image-builder.js';
import { containerSuite, ContainerWorld, rejectsWith } from './world.js';
import { eventually } from '../../helpers/wait.js';

describe('containers: image-declared VOLUMEs (real runc, conmon and CNI)', function () {
  this.timeout(120_000);
  const world = new ContainerWorld();
  let pod: Awaited<ReturnType<ContainerWorld['pod']>>;
  const refs = new Map<string, string>();

  /** The image's content: /data owned by 1000 with a file, /srv/db behind the symlink /var/lib/db. */
  const files: LayerEntry[] = [
    { type: 'dir', path: 'data', uid: 1000, gid: 1000, mode: 0o750 },
    { path: 'data/seed.txt', content: 'seed from the image\n', uid: 1000, gid: 1000, mode: 0o640 },
    { type: 'dir', path: 'data/sub' },
    { path: 'data/sub/deep.txt', content: 'deep\n' },
    // Copied as a symlink, never followed: inside the container it names the container's own /etc.
    { type: 'symlink', path: 'data/escape', target: '../../../../../etc' },
    { type: 'dir', path: 'var/lib' },
    { type: 'symlink', path: 'var/lib/db', target: '/srv/db' },
    { type: 'dir', path: 'srv' },
    { type: 'dir', path: 'srv/db', uid: 999, gid: 999 },
    { path: 'srv/db/schema.sql', content: 'create table t;\n' },
    { path: 'afile', content: 'not a dir\n' },
    { path: 'zfile', content: 'not a dir either\n' },
    { type: 'symlink', path: 'outside', target: '../../..' },
  ];

  const images: Record<string, string[]> = {
    vols: ['/data', '/cache/', '/var/lib/db'],
    proc: ['/proc/x'],
    dotdot: ['/data/../etc'],
    relative: ['data'],
    file: ['/afile'],
    outside: ['/outside/x'],
    many: Array.from({ length: 65 }, (_, i) => `/v${i}`),
    // /data is copied before /zfile is refused: the failed create must take the copy with it.
    late: ['/data', '/zfile'],
  };

  containerSuite(world, 'declared volume tests', {
    scope: 'containers',
    setup: async () => {
      pod = await world.pod();
      for (const [name, volumes] of Object.entries(images)) {
        const image = await pushBusyboxImage(world.registry, `decl/${name}:1`, { cmd: ['sleep', '3600'], volumes, extraFiles: files });
        await world.runtime.pull(image.reference);
        refs.set(name, image.reference);
      }
    },
  });

  const config = (image: string, c: Parameters<ContainerWorld['config']>[1] = {}) => world.config('sleeper', { ...c, image: { image: refs.get(image)! } });
  const sh = async (id: string, script: string) => (await world.exec(id, ['sh', '-c', script])).stdout;
  /** The host dir bound at `destination`, from the spec the runtime got. */
  const sourceOf = async (id: string, destination: string): Promise<string | undefined> =>
    ((await world.info(id)).runtimeSpec.mounts as { destination: string; source: string }[]).find((m) => m.destination === destination)?.source;

  it('copy: a read-only root filesystem container writes its VOLUMEs and reads the image content there; removal takes the copies', async () => {
    const id = await world.run(pod, config('vols', { linux: { securityContext: { readonlyRootfs: true } } }));
    assert.equal(await sh(id, 'cat /data/seed.txt'), 'seed from the image\n');
    assert.equal(await sh(id, 'cat /data/sub/deep.txt'), 'deep\n');
    // Owners and modes as in the image; the symlink is a symlink.
    assert.equal(await sh(id, 'stat -c %u:%g:%a /data /data/seed.txt'), '1000:1000:750\n1000:1000:640\n');
    assert.equal(await sh(id, 'readlink /data/escape'), '../../../../../etc\n');
    // Writable where declared (the symlinked one lands on its target's copy), read-only elsewhere.
    assert.equal(await sh(id, 'echo w > /data/new && echo c > /cache/x && echo d > /var/lib/db/y && cat /data/new /cache/x /var/lib/db/schema.sql /var/lib/db/y'), 'w\nc\ncreate table t;\nd\n');
    assert.equal(await sh(id, 'stat -L -c %u:%g:%a /cache /var/lib/db'), '0:0:755\n999:999:755\n');
    assert.match(await sh(id, '(echo x > /elsewhere) 2>&1; true'), /Read-only file system/);
    // Counted in the writable layer.
    const before = (await world.daemon.clients.runtime.containerStats({ containerId: id })).stats!.writableLayer!.usedBytes!.value;
    await sh(id, 'dd if=/dev/zero of=/data/big bs=1M count=4 2>/dev/null; sync');
    // A writable layer is walked at most once per 10 s (stats/stats.ts): the growth shows within that.
    const used = async () => (await world.daemon.clients.runtime.containerStats({ containerId: id })).stats!.writableLayer!.usedBytes!.value;
    await eventually('the 4 MiB written under /data counted in the writable layer', async () => (await used()) - before >= 4_000_000n, { timeoutMs: 25_000, intervalMs: 500 });

    const source = await sourceOf(id, '/data');
    assert.ok(source?.startsWith(world.daemon.root), `copy under the daemon's root: ${source}`);
    assert.equal((await stat(join(source!, 'new'))).isFile(), true);
    // Not a copy of /elsewhere: the image's own layers are untouched.
    await world.daemon.clients.runtime.removeContainer({ containerId: id });
    await assert.rejects(stat(source!), { code: 'ENOENT' });
  });

  it('copy: two containers of one image get separate copies', async () => {
    const a = await world.run(pod, config('vols'));
    const b = await world.run(pod, config('vols'));
    await sh(a, 'echo only-a > /data/seed.txt; echo a > /cache/mine');
    assert.equal(await sh(b, 'cat /data/seed.txt; ls /cache'), 'seed from the image\n');
    assert.notEqual(await sourceOf(a, '/data'), await sourceOf(b, '/data'));
  });

  it('copy: a CRI mount at the same path wins', async () => {
    const host = await mkdtemp(join(tmpdir(), 'stove-decl-'));
    try {
      await writeFile(join(host, 'from-host'), 'host\n');
      const id = await world.run(pod, config('vols', { mounts: [Mount.fromPartial({ containerPath: '/data/', hostPath: host })] }));
      assert.equal(await sh(id, 'ls /data'), 'from-host\n');
      assert.equal(await sourceOf(id, '/data/'), host);
      assert.equal(((await world.info(id)).runtimeSpec.mounts as { destination: string }[]).filter((m) => m.destination.replace(/\/$/, '') === '/data').length, 1);
    } finally {
      await world.removeContainers();
      await rm(host, { recursive: true, force: true });
    }
  });

  it('refuses hostile VOLUMEs with FAILED_PRECONDITION naming the image and path, leaving nothing behind', async () => {
    const create = (image: string) => world.create(pod, config(image));
    await rejectsWith(create('proc'), 'FAILED_PRECONDITION', /declares VOLUME "\/proc\/x", which is where a kernel filesystem is mounted/);
    await rejectsWith(create('dotdot'), 'FAILED_PRECONDITION', /VOLUME "\/data\/..\/etc", which contains "\.\."/);
    await rejectsWith(create('relative'), 'FAILED_PRECONDITION', /VOLUME "data", which is not an absolute path/);
    await rejectsWith(create('file'), 'FAILED_PRECONDITION', /VOLUME "\/afile" is not a directory in the image/);
    await rejectsWith(create('outside'), 'FAILED_PRECONDITION', /VOLUME "\/outside\/x".* leads outside its root/);
    await rejectsWith(create('many'), 'FAILED_PRECONDITION', /declares 65 VOLUMEs, more than the 64/);
    // The suite's after-each check finds no container dir, mount, hold or runtime container left.
  });

  it('a create that fails after the copies were made (a later VOLUME, a later step) leaves no copy behind', async () => {
    await rejectsWith(world.create(pod, config('late')), 'FAILED_PRECONDITION', /VOLUME "\/zfile" is not a directory in the image/);
    // A step after the copies: a Localhost seccomp profile that does not exist.
    await rejectsWith(
      world.create(pod, config('vols', { linux: { securityContext: { seccomp: { profileType: SecurityProfile_ProfileType.Localhost, localhostRef: '/nonexistent/profile.json' } } } })),
      'INVALID_ARGUMENT',
      /seccomp Localhost profile "\/nonexistent\/profile\.json" does not exist/,
    );
    const { containers } = await world.daemon.clients.runtime.listContainers({ filter: undefined });
    assert.equal(containers.length, 0);
    // The suite's after-each check: no <root>/containers/<id> (where the copies are) is left.
  });

  it('copy: in a pod with its own user namespace the copy keeps the image owners as the container sees them', async () => {
    const mapping = [{ containerId: 0, hostId: 710000, length: 65536 }];
    const userns = { mode: NamespaceMode.POD, uids: mapping, gids: mapping };
    const nsPod = await world.pod({ linux: { securityContext: { namespaceOptions: { usernsOptions: userns } } } });
    try {
      const id = await world.run(nsPod, config('vols', { linux: { securityContext: { namespaceOptions: { usernsOptions: userns } } } }));
      assert.equal(await sh(id, 'stat -c %u:%g /data /data/seed.txt /cache; cat /data/seed.txt; echo x > /cache/y && echo ok'), '1000:1000\n1000:1000\n0:0\nseed from the image\nok\n');
      const source = await sourceOf(id, '/data');
      assert.equal((await stat(join(source!, 'seed.txt'))).uid, 711000, 'host owner: the image owner shifted into the pod range');
    } finally {
      await world.removeContainers();
      await world.pods.runtime.stopPodSandbox({ podSandboxId: nsPod.id });
      await world.pods.runtime.removePodSandbox({ podSandboxId: nsPod.id });
    }
  });

  describe('other modes', () => {
    after(async () => {
      world.pods.runtimeToml = [];
      await world.pods.restart('SIGTERM');
    });

    it('mkdir: the directory is made in the root filesystem for the container user; nothing is mounted', async () => {
      world.pods.runtimeToml = ['image_volumes = "mkdir"'];
      await world.pods.restart('SIGTERM');
      const id = await world.run(pod, config('vols', { linux: { securityContext: { runAsUser: { value: 1000n } } } }));
      assert.equal(await sh(id, 'stat -c %u:%g /cache; cat /data/seed.txt'), '1000:1000\nseed from the image\n');
      assert.equal(await sh(id, 'grep -c -E " /(data|cache|var/lib/db) " /proc/self/mountinfo; true'), '0\n');
      assert.equal(await sourceOf(id, '/data'), undefined);
      const ro = await world.run(pod, config('vols', { linux: { securityContext: { readonlyRootfs: true } } }));
      assert.match(await sh(ro, '(echo x > /data/new) 2>&1; true'), /Read-only file system/);
      // Hostile paths are refused in this mode too.
      await rejectsWith(world.create(pod, config('outside')), 'FAILED_PRECONDITION', /leads outside its root/);
    });

    it('ignore: nothing is made or mounted', async () => {
      world.pods.runtimeToml = ['image_volumes = "ignore"'];
      await world.pods.restart('SIGTERM');
      const id = await world.run(pod, config('vols'));
      assert.equal(await sh(id, 'ls -d /cache 2>&1; true'), 'ls: /cache: No such file or directory\n');
      assert.equal(await sourceOf(id, '/data'), undefined);
      // Not even hostile VOLUMEs are looked at.
      await world.removeContainers();
      const outside = await world.create(pod, config('outside'));
      assert.ok(outside);
    });
  });
});
