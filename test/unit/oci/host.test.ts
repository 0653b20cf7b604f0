import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, realpath, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MountPropagation, type Mount as CriMount } from '../../../src/gen/runtime/v1/api.js';
import { parseMountInfo } from '../../../src/platform/proc.js';
import { checkPropagation, prepareMounts } from '../../../src/oci/host-mounts.js';
import { resolveDevices, splitDevT } from '../../../src/oci/host-devices.js';
import { readUserDatabase, resolveInRoot } from '../../../src/oci/host-user.js';
import { loadDefaultSeccompProfile, loadSeccompProfiles } from '../../../src/oci/host-security.js';
import { kernelSupportsRro } from '../../../src/oci/host-settings.js';
import { rejectsKind, throwsKind } from './helpers.js';

const MOUNTINFO = [
  '22 1 252:1 / / rw,relatime - ext4 /dev/vda rw',
  '30 22 0:40 / /mnt/shared rw,relatime shared:7 - tmpfs tmpfs rw',
  '31 22 0:41 / /mnt/slave rw,relatime master:7 - tmpfs tmpfs rw',
  '32 22 0:42 / /mnt/both rw,relatime shared:9 master:7 - tmpfs tmpfs rw',
  '33 30 0:43 / /mnt/shared/private rw,relatime - tmpfs tmpfs rw',
  '34 22 0:44 / /mnt/with\\040space rw,relatime shared:11 - tmpfs tmpfs rw',
].join('\n');

const mount = (hostPath: string, propagation = MountPropagation.PROPAGATION_PRIVATE): CriMount => ({
  containerPath: '/data',
  hostPath,
  readonly: false,
  selinuxRelabel: false,
  propagation,
  uidMappings: [],
  gidMappings: [],
  recursiveReadOnly: false,
  image: undefined,
  imageSubPath: '',
});

describe('host preparation', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await realpath(await mkdtemp(join(tmpdir(), 'stove-spec-')));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  describe('checkPropagation (mountinfo)', () => {
    const info = parseMountInfo(MOUNTINFO);
    const BI = MountPropagation.PROPAGATION_BIDIRECTIONAL;
    const H2C = MountPropagation.PROPAGATION_HOST_TO_CONTAINER;

    it('Bidirectional needs a shared mount', () => {
      checkPropagation('/mnt/shared/x', BI, info);
      checkPropagation('/mnt/both', BI, info);
      checkPropagation('/mnt/with space/x', BI, info);
      throwsKind(() => checkPropagation('/mnt/slave/x', BI, info), 'FailedPrecondition', /mounted on "\/mnt\/slave" but it is not a shared mount/);
      throwsKind(() => checkPropagation('/srv/x', BI, info), 'FailedPrecondition', /mounted on "\/" but it is not a shared mount/);
      throwsKind(() => checkPropagation('/mnt/shared/private/y', BI, info), 'FailedPrecondition', /"\/mnt\/shared\/private"/);
    });

    it('HostToContainer needs a shared or slave mount', () => {
      checkPropagation('/mnt/shared', H2C, info);
      checkPropagation('/mnt/slave/deep/path', H2C, info);
      throwsKind(() => checkPropagation('/mnt/sharedx', H2C, info), 'FailedPrecondition', /not a shared or slave mount/);
    });
  });

  describe('prepareMounts', () => {
    it('creates a missing host path as a directory and resolves symlinks', async () => {
      const missing = join(dir, 'a/b');
      const [m] = await prepareMounts([mount(missing)], parseMountInfo(MOUNTINFO));
      assert.ok((await stat(missing)).isDirectory());
      assert.equal(m!.hostPath, missing);
      await symlink(missing, join(dir, 'link'));
      const [l] = await prepareMounts([mount(join(dir, 'link'))]);
      assert.equal(l!.hostPath, missing);
    });

    it('refuses propagation the host mount cannot give (this tmp dir is on a private mount here)', async () => {
      const info = parseMountInfo(`22 1 252:1 / / rw - ext4 /dev/vda rw`);
      await rejectsKind(prepareMounts([mount(dir, MountPropagation.PROPAGATION_BIDIRECTIONAL)], info), 'FailedPrecondition', /not a shared mount/);
    });

    it('refuses empty host paths, image volumes and relative container paths', async () => {
      await rejectsKind(prepareMounts([mount('')]), 'InvalidArgument', /host_path is empty/);
      await rejectsKind(prepareMounts([{ ...mount(''), image: { image: 'busybox', annotations: {}, userSpecifiedImage: '', runtimeHandler: '', imageRef: '' } }]), 'Internal', /image volume "busybox" for "\/data" was not mounted/);
      await rejectsKind(prepareMounts([{ ...mount(dir), containerPath: 'x' }]), 'InvalidArgument', /absolute/);
    });
  });

  describe('resolveDevices', () => {
    it('stats a device node through a symlink', async () => {
      await symlink('/dev/null', join(dir, 'null-link'));
      const [d] = await resolveDevices([{ hostPath: join(dir, 'null-link'), containerPath: '/dev/xnull', permissions: 'rw' }]);
      assert.deepEqual(d, { containerPath: '/dev/xnull', hostPath: '/dev/null', type: 'c', major: 1, minor: 3, fileMode: 0o666, uid: 0, gid: 0, permissions: 'rw' });
    });

    it('defaults permissions to rwm and the container path to the host path', async () => {
      const [d] = await resolveDevices([{ hostPath: '/dev/zero', containerPath: '', permissions: '' }]);
      assert.equal(d!.containerPath, '/dev/zero');
      assert.equal(d!.permissions, 'rwm');
    });

    it('refuses files that are not devices, missing paths and bad permissions', async () => {
      await writeFile(join(dir, 'f'), 'x');
      await rejectsKind(resolveDevices([{ hostPath: join(dir, 'f'), containerPath: '/dev/f', permissions: '' }]), 'InvalidArgument', /not a device node/);
      await rejectsKind(resolveDevices([{ hostPath: join(dir, 'nope'), containerPath: '/dev/n', permissions: '' }]), 'InvalidArgument', /cannot use host_path/);
      await rejectsKind(resolveDevices([{ hostPath: '/dev/null', containerPath: '/dev/n', permissions: 'rwx' }]), 'InvalidArgument', /invalid permissions "rwx"/);
    });

    it('splits dev_t like glibc', () => {
      assert.deepEqual(splitDevT(0x0103n), { major: 1, minor: 3 });
      assert.deepEqual(splitDevT((259n << 8n) | 5n), { major: 259, minor: 5 });
      // major 4096, minor 256 use the high bits.
      assert.deepEqual(splitDevT((1n << 44n) | (1n << 20n)), { major: 4096, minor: 256 });
    });
  });

  describe('reading /etc/passwd inside a rootfs', () => {
    it('follows symlinks inside the rootfs, never out of it', async () => {
      const root = join(dir, 'rootfs');
      await mkdir(join(root, 'etc'), { recursive: true });
      await mkdir(join(root, 'data'), { recursive: true });
      await writeFile(join(root, 'data/passwd'), 'app:x:10:20::/:/bin/sh\n');
      // An absolute link must resolve inside the rootfs, not to the host's /data/passwd.
      await symlink('/data/passwd', join(root, 'etc/passwd'));
      await symlink('../../../../../../etc/shadow-nope', join(root, 'etc/group'));
      assert.equal(await resolveInRoot(root, '/etc/passwd'), join(root, 'data/passwd'));
      assert.equal(await resolveInRoot(root, '/etc/group'), join(root, 'etc/shadow-nope'));
      assert.deepEqual(await readUserDatabase(root), { passwd: 'app:x:10:20::/:/bin/sh\n', group: null });
    });

    it('reports a symlink loop', async () => {
      const root = join(dir, 'loop');
      await mkdir(join(root, 'etc'), { recursive: true });
      await symlink('/etc/passwd', join(root, 'etc/passwd'));
      await assert.rejects(readUserDatabase(root), /too many levels of symbolic links/);
    });

    it('names /etc/passwd when both files fail, even when /etc/group fails first', async () => {
      const root = join(dir, 'both-bad');
      await mkdir(join(root, 'etc'), { recursive: true });
      // /etc/passwd fails slowly (a chain of 41 links to follow), /etc/group at once (a FIFO).
      for (let i = 0; i < 41; i++) await symlink(`/etc/l${i + 1}`, join(root, `etc/${i ? `l${i}` : 'passwd'}`));
      execFileSync('mkfifo', [join(root, 'etc/group')]);
      await assert.rejects(readUserDatabase(root), /too many levels of symbolic links in \/etc\/passwd/);
    });
  });

  describe('seccomp profile files', () => {
    it('loads the built-in RuntimeDefault profile', async () => {
      const p = await loadDefaultSeccompProfile();
      assert.equal(p.defaultAction, 'SCMP_ACT_ERRNO');
      assert.ok(p.syscalls!.length > 10);
    });

    it('loads Localhost profiles and reports a missing file clearly', async () => {
      const file = join(dir, 'p.json');
      await writeFile(file, JSON.stringify({ defaultAction: 'SCMP_ACT_ALLOW' }));
      assert.deepEqual(await loadSeccompProfiles([{ kind: 'localhost', path: file }, { kind: 'unconfined' }]), { [file]: { defaultAction: 'SCMP_ACT_ALLOW' } });
      await rejectsKind(loadSeccompProfiles([{ kind: 'localhost', path: join(dir, 'missing.json') }]), 'InvalidArgument', /does not exist/);
      await writeFile(file, '{nope');
      await rejectsKind(loadSeccompProfiles([{ kind: 'localhost', path: file }]), 'InvalidArgument', /not valid JSON/);
    });
  });

  it('rro needs Linux 5.12', () => {
    assert.equal(kernelSupportsRro('5.11.0'), false);
    assert.equal(kernelSupportsRro('5.12.1-foo'), true);
    assert.equal(kernelSupportsRro('6.1.0'), true);
  });
});

describe('host settings helpers', () => {
  it('raises OOM scores to the daemon\'s own only without CAP_SYS_RESOURCE', async () => {
    const { oomScoreClamper } = await import('../../../src/oci/resources.js');
    const { silentLogger } = await import('../../../src/common/logger.js');
    assert.equal(oomScoreClamper(0, ['CAP_CHOWN', 'CAP_SYS_RESOURCE'], silentLogger), undefined, 'root: the kubelet\'s -997 and the pause -998 as asked');
    const clamp = oomScoreClamper(-500, ['CAP_CHOWN'], silentLogger);
    assert.ok(clamp);
    assert.equal(clamp(-998), -500);
    assert.equal(clamp(-997), -500);
    assert.equal(clamp(1000), 1000);
  });
  it('reads rro support from `runc features`', async () => {
    const { rroFromRuncFeatures, PAUSE_ROOTFS } = await import('../../../src/oci/host-settings.js');
    assert.equal(rroFromRuncFeatures('{"mountOptions":["bind","rro","ro"]}'), true);
    assert.equal(rroFromRuncFeatures('{"mountOptions":["bind","ro"]}'), false);
    assert.equal(rroFromRuncFeatures('not json'), false);
    assert.match(PAUSE_ROOTFS, /\/rootfs\/pause$/);
    assert.ok(!PAUSE_ROOTFS.includes('/dist/'));
  });
});
