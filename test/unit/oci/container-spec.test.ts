import assert from 'node:assert/strict';
import { MountPropagation, NamespaceMode, SecurityProfile_ProfileType } from '../../../src/gen/runtime/v1/api.js';
import { DEFAULT_MASKED_PATHS, DEFAULT_READONLY_PATHS, DEFAULT_PATH_ENV } from '../../../src/oci/defaults.js';
import { ANNOTATIONS } from '../../../src/oci/annotations.js';
import type { Mount, Spec } from '../../../src/oci/types.js';
import { build, containerConfig, CONTAINER_ID, imageConfig, PAUSE_PID, podConfig, SANDBOX_ID, testSettings } from './fixtures.js';
import { throwsKind } from './helpers.js';

const CONTAINERD_CAPS = [
  'CAP_CHOWN', 'CAP_DAC_OVERRIDE', 'CAP_FSETID', 'CAP_FOWNER', 'CAP_MKNOD', 'CAP_NET_RAW', 'CAP_SETGID',
  'CAP_SETUID', 'CAP_SETFCAP', 'CAP_SETPCAP', 'CAP_NET_BIND_SERVICE', 'CAP_SYS_CHROOT', 'CAP_KILL', 'CAP_AUDIT_WRITE',
];

const mountAt = (spec: Spec, dst: string): Mount | undefined => spec.mounts!.filter((m) => m.destination === dst).at(-1);
const privilegedPod = () => podConfig({ linux: { securityContext: { privileged: true } } });

describe('buildContainerSpec', () => {
  describe('process', () => {
    const cases: { name: string; command: string[]; args: string[]; entrypoint?: string[]; cmd?: string[]; want: string[] }[] = [
      { name: 'image entrypoint + cmd when the config gives neither', command: [], args: [], want: ['/entry', 'cmd-arg'] },
      { name: 'command replaces entrypoint and drops cmd', command: ['/bin/run'], args: [], want: ['/bin/run'] },
      { name: 'command and args', command: ['/bin/run'], args: ['a', 'b'], want: ['/bin/run', 'a', 'b'] },
      { name: 'args alone replace cmd', command: [], args: ['x'], want: ['/entry', 'x'] },
      { name: 'args alone without an entrypoint', command: [], args: ['/bin/x'], entrypoint: [], want: ['/bin/x'] },
      { name: 'ENTRYPOINT [""] means none', command: [], args: [], entrypoint: [''], cmd: ['/bin/sh'], want: ['/bin/sh'] },
      { name: 'cmd only image', command: [], args: [], entrypoint: [], cmd: ['/bin/sh', '-c', 'x'], want: ['/bin/sh', '-c', 'x'] },
    ];
    for (const c of cases) {
      it(`args: ${c.name}`, () => {
        const spec = build({
          config: containerConfig({ command: c.command, args: c.args }),
          image: imageConfig({ Entrypoint: c.entrypoint ?? ['/entry'], Cmd: c.cmd ?? ['cmd-arg'] }),
        });
        assert.deepEqual(spec.process!.args, c.want);
      });
    }

    it('refuses an empty command line with InvalidArgument', () => {
      throwsKind(
        () => build({ config: containerConfig({ command: [], args: [] }), image: imageConfig({ Entrypoint: null, Cmd: null }) }),
        'InvalidArgument',
        /no command specified/,
      );
    });

    it('env: default PATH, HOSTNAME, image env, then config env winning', () => {
      const spec = build({
        config: containerConfig({ envs: [{ key: 'IMAGE', value: 'from-config' }, { key: 'NEW', value: 'a=b' }] }),
        image: imageConfig({ Env: ['IMAGE=1', 'ONLY_IMAGE=2'] }),
      });
      assert.deepEqual(spec.process!.env, [DEFAULT_PATH_ENV, 'HOSTNAME=pod-host', 'IMAGE=from-config', 'ONLY_IMAGE=2', 'NEW=a=b']);
    });

    it('env: the image may replace PATH and the config may replace HOSTNAME', () => {
      const spec = build({
        config: containerConfig({ envs: [{ key: 'HOSTNAME', value: 'mine' }] }),
        image: imageConfig({ Env: ['PATH=/image/bin'] }),
      });
      assert.deepEqual(spec.process!.env, ['PATH=/image/bin', 'HOSTNAME=mine']);
    });

    it('working dir: config, else image, else /', () => {
      assert.equal(build({ config: containerConfig({ workingDir: '/cfg' }) }).process!.cwd, '/cfg');
      assert.equal(build().process!.cwd, '/image-wd');
      assert.equal(build({ image: imageConfig({ WorkingDir: '' }) }).process!.cwd, '/');
    });

    it('tty sets terminal; rlimits are cleared; no_new_privs only when asked', () => {
      const plain = build();
      assert.equal(plain.process!.terminal, undefined);
      assert.equal(plain.process!.rlimits, undefined);
      assert.equal(plain.process!.noNewPrivileges, false);
      const tty = build({ config: containerConfig({ tty: true, linux: { securityContext: { noNewPrivs: true } } }) });
      assert.equal(tty.process!.terminal, true);
      assert.equal(tty.process!.noNewPrivileges, true);
    });

    it('user comes from the resolved user', () => {
      const spec = build({ host: { user: { uid: 1000, gid: 50, additionalGids: [50, 1234] } } });
      assert.deepEqual(spec.process!.user, { uid: 1000, gid: 50, additionalGids: [50, 1234] });
    });

    it('oom_score_adj from resources, clamped to the daemon floor', () => {
      assert.equal(build().process!.oomScoreAdj, undefined);
      const high = build({ config: containerConfig({ linux: { resources: { oomScoreAdj: 500n } } }) });
      assert.equal(high.process!.oomScoreAdj, 500);
      const low = build({ config: containerConfig({ linux: { resources: { oomScoreAdj: -997n } } }) });
      assert.equal(low.process!.oomScoreAdj, 0);
    });
  });

  describe('capabilities', () => {
    const cases: { name: string; add?: string[]; drop?: string[]; want: (caps: string[]) => string[] }[] = [
      { name: 'containerd defaults', want: () => CONTAINERD_CAPS },
      { name: 'add without prefix', add: ['NET_ADMIN'], want: () => [...CONTAINERD_CAPS, 'CAP_NET_ADMIN'] },
      { name: 'add with prefix, any case', add: ['cap_sys_admin'], want: () => [...CONTAINERD_CAPS, 'CAP_SYS_ADMIN'] },
      { name: 'drop', drop: ['CHOWN', 'CAP_KILL'], want: () => CONTAINERD_CAPS.filter((c) => c !== 'CAP_CHOWN' && c !== 'CAP_KILL') },
      { name: 'add ALL, drop one', add: ['ALL'], drop: ['CHOWN'], want: (all) => all.filter((c) => c !== 'CAP_CHOWN') },
      { name: 'drop ALL, add one', add: ['CHOWN'], drop: ['ALL'], want: () => ['CAP_CHOWN'] },
      { name: 'drop ALL', drop: ['all'], want: () => [] },
    ];
    for (const c of cases) {
      it(c.name, () => {
        const settings = testSettings();
        const spec = build({ config: containerConfig({ linux: { securityContext: { capabilities: { addCapabilities: c.add ?? [], dropCapabilities: c.drop ?? [] } } } }) });
        const want = c.want([...settings.allCapabilities]);
        const caps = spec.process!.capabilities!;
        assert.deepEqual([...caps.bounding!].sort(), [...want].sort());
        assert.deepEqual(caps.effective, caps.bounding);
        assert.deepEqual(caps.permitted, caps.bounding);
        assert.deepEqual(caps.inheritable, []);
        assert.deepEqual(caps.ambient, []);
      });
    }

    it('ambient capabilities go to inheritable and ambient too', () => {
      const spec = build({ config: containerConfig({ linux: { securityContext: { capabilities: { addAmbientCapabilities: ['NET_BIND_SERVICE'] } } } }) });
      assert.deepEqual(spec.process!.capabilities!.ambient, ['CAP_NET_BIND_SERVICE']);
      assert.deepEqual(spec.process!.capabilities!.inheritable, ['CAP_NET_BIND_SERVICE']);
    });

    it('an unknown capability is InvalidArgument', () => {
      throwsKind(() => build({ config: containerConfig({ linux: { securityContext: { capabilities: { addCapabilities: ['FLY'] } } } }) }), 'InvalidArgument', /unknown capability "FLY"/);
    });

    it('a capability the daemon lacks is FailedPrecondition; defaults it lacks are left out', () => {
      throwsKind(
        () => build({ config: containerConfig({ linux: { securityContext: { capabilities: { addCapabilities: ['SYS_RESOURCE'] } } } }) }),
        'FailedPrecondition',
        /CAP_SYS_RESOURCE/,
      );
      const spec = build({ settings: testSettings({ defaultCapabilities: ['CAP_CHOWN', 'CAP_SYS_RESOURCE'] }) });
      assert.deepEqual(spec.process!.capabilities!.bounding, ['CAP_CHOWN']);
    });
  });

  describe('privileged', () => {
    const privileged = () =>
      build({
        pod: privilegedPod(),
        config: containerConfig({
          linux: { securityContext: { privileged: true, capabilities: { dropCapabilities: ['ALL'] }, seccomp: { profileType: SecurityProfile_ProfileType.RuntimeDefault } } },
        }),
        host: { hostDevices: [{ containerPath: '/dev/sda', hostPath: '/dev/sda', type: 'b', major: 8, minor: 0, fileMode: 0o660, uid: 0, gid: 6, permissions: 'rwm' }] },
      });

    it('gets every capability the daemon holds, regardless of drops', () => {
      const spec = privileged();
      assert.deepEqual(spec.process!.capabilities!.bounding, testSettings().allCapabilities);
    });

    it('has no masked or read-only paths, writable sysfs and cgroupfs, no seccomp', () => {
      const spec = privileged();
      assert.equal(spec.linux!.maskedPaths, undefined);
      assert.equal(spec.linux!.readonlyPaths, undefined);
      assert.ok(mountAt(spec, '/sys')!.options!.includes('rw'));
      assert.ok(!mountAt(spec, '/sys')!.options!.includes('ro'));
      assert.ok(mountAt(spec, '/sys/fs/cgroup')!.options!.includes('rw'));
      assert.equal(spec.linux!.seccomp, undefined);
    });

    it('gets the host devices and an allow-all device rule', () => {
      const spec = privileged();
      assert.deepEqual(spec.linux!.devices, [{ path: '/dev/sda', type: 'b', major: 8, minor: 0, fileMode: 0o660, uid: 0, gid: 6 }]);
      assert.deepEqual(spec.linux!.resources!.devices, [{ allow: true, access: 'rwm' }]);
    });

    it('is refused in a sandbox that is not privileged', () => {
      throwsKind(() => build({ config: containerConfig({ linux: { securityContext: { privileged: true } } }) }), 'InvalidArgument', /no privileged container allowed in sandbox/);
    });
  });

  describe('masked and read-only paths', () => {
    it('uses the kubelet defaults when the request gives none', () => {
      const spec = build();
      assert.deepEqual(spec.linux!.maskedPaths, DEFAULT_MASKED_PATHS);
      assert.deepEqual(spec.linux!.readonlyPaths, DEFAULT_READONLY_PATHS);
    });

    it("uses the request's lists when given", () => {
      const spec = build({ config: containerConfig({ linux: { securityContext: { maskedPaths: ['/proc/x'], readonlyPaths: ['/proc/y'] } } }) });
      assert.deepEqual(spec.linux!.maskedPaths, ['/proc/x']);
      assert.deepEqual(spec.linux!.readonlyPaths, ['/proc/y']);
    });
  });

  describe('read-only root', () => {
    it('makes root and the pod /etc files read-only, /dev/shm stays writable', () => {
      const spec = build({ config: containerConfig({ linux: { securityContext: { readonlyRootfs: true } } }) });
      assert.equal(spec.root!.readonly, true);
      for (const p of ['/etc/hostname', '/etc/hosts', '/etc/resolv.conf']) assert.ok(mountAt(spec, p)!.options!.includes('ro'), p);
      assert.ok(mountAt(spec, '/dev/shm')!.options!.includes('rw'));
    });

    it('is writable by default', () => {
      const spec = build();
      assert.equal(spec.root!.readonly, undefined);
      assert.equal(spec.root!.path, 'rootfs');
      assert.ok(mountAt(spec, '/etc/hostname')!.options!.includes('rw'));
    });
  });

  describe('mounts', () => {
    const withMount = (m: object) => containerConfig({ mounts: [{ containerPath: '/data', hostPath: '/srv/data', ...m }] });

    const propagation: { p: MountPropagation; opt: string; rootfs?: string }[] = [
      { p: MountPropagation.PROPAGATION_PRIVATE, opt: 'rprivate' },
      { p: MountPropagation.PROPAGATION_HOST_TO_CONTAINER, opt: 'rslave', rootfs: 'rslave' },
      { p: MountPropagation.PROPAGATION_BIDIRECTIONAL, opt: 'rshared', rootfs: 'rshared' },
    ];
    for (const c of propagation) {
      it(`propagation ${MountPropagation[c.p]} → ${c.opt}`, () => {
        const spec = build({ config: withMount({ propagation: c.p }) });
        assert.deepEqual(mountAt(spec, '/data'), { destination: '/data', type: 'bind', source: '/srv/data', options: ['rbind', c.opt, 'rw'] });
        assert.equal(spec.linux!.rootfsPropagation, c.rootfs);
      });
    }

    it('rshared wins over rslave for the rootfs propagation', () => {
      const spec = build({
        config: containerConfig({
          mounts: [
            { containerPath: '/a', hostPath: '/a', propagation: MountPropagation.PROPAGATION_BIDIRECTIONAL },
            { containerPath: '/b', hostPath: '/b', propagation: MountPropagation.PROPAGATION_HOST_TO_CONTAINER },
          ],
        }),
      });
      assert.equal(spec.linux!.rootfsPropagation, 'rshared');
    });

    it('readonly → ro; recursive_read_only → rro when supported', () => {
      assert.deepEqual(mountAt(build({ config: withMount({ readonly: true }) }), '/data')!.options, ['rbind', 'rprivate', 'ro']);
      assert.deepEqual(mountAt(build({ config: withMount({ readonly: true, recursiveReadOnly: true }) }), '/data')!.options, ['rbind', 'rprivate', 'rro']);
    });

    it('recursive_read_only errors: unsupported runtime, not private, not read-only', () => {
      throwsKind(
        () => build({ config: withMount({ readonly: true, recursiveReadOnly: true }), settings: testSettings({ recursiveReadOnlyMounts: false }) }),
        'InvalidArgument',
        /does not support recursive read-only mounts/,
      );
      throwsKind(
        () => build({ config: withMount({ readonly: true, recursiveReadOnly: true, propagation: MountPropagation.PROPAGATION_HOST_TO_CONTAINER }) }),
        'InvalidArgument',
        /needs private propagation/,
      );
      throwsKind(() => build({ config: withMount({ recursiveReadOnly: true }) }), 'InvalidArgument', /conflicts with RW mount/);
    });

    it('standard mounts: proc, dev, pts, mqueue, ro sysfs, ro cgroup; no /run', () => {
      const spec = build();
      const dsts = spec.mounts!.map((m) => m.destination);
      for (const d of ['/proc', '/dev', '/dev/pts', '/dev/mqueue', '/sys', '/sys/fs/cgroup', '/dev/shm', '/etc/hostname', '/etc/hosts', '/etc/resolv.conf']) {
        assert.ok(dsts.includes(d), d);
      }
      assert.ok(!dsts.includes('/run'));
      assert.deepEqual(mountAt(spec, '/sys')!.options, ['nosuid', 'noexec', 'nodev', 'ro']);
      assert.deepEqual(mountAt(spec, '/sys/fs/cgroup'), { destination: '/sys/fs/cgroup', type: 'cgroup', source: 'cgroup', options: ['nosuid', 'noexec', 'nodev', 'relatime', 'ro'] });
      assert.deepEqual(mountAt(spec, '/dev/shm'), { destination: '/dev/shm', type: 'bind', source: `/run/stove/sandboxes/${SANDBOX_ID}/shm`, options: ['rbind', 'rprivate', 'rw'] });
      assert.equal(new Set(dsts).size, dsts.length, 'no destination twice');
    });

    it('a CRI mount replaces the pod file at the same path', () => {
      const spec = build({ config: containerConfig({ mounts: [{ containerPath: '/etc/hosts', hostPath: '/var/lib/kubelet/pods/x/etc-hosts' }] }) });
      const hosts = spec.mounts!.filter((m) => m.destination === '/etc/hosts');
      assert.equal(hosts.length, 1);
      assert.equal(hosts[0]!.source, '/var/lib/kubelet/pods/x/etc-hosts');
    });

    it('a CRI mount of /dev replaces every default mount under /dev', () => {
      const spec = build({ config: containerConfig({ mounts: [{ containerPath: '/dev', hostPath: '/dev' }] }) });
      const dev = spec.mounts!.filter((m) => m.destination === '/dev' || m.destination.startsWith('/dev/'));
      assert.deepEqual(dev.map((m) => [m.destination, m.type]), [['/dev', 'bind'], ['/dev/shm', 'bind']]);
    });

    it('bind mounts are ordered shallowest first, stable otherwise', () => {
      const spec = build({
        config: containerConfig({
          mounts: [
            { containerPath: '/a/b/c', hostPath: '/h1' },
            { containerPath: '/a', hostPath: '/h2' },
            { containerPath: '/z/y', hostPath: '/h3' },
            { containerPath: '/x/y', hostPath: '/h4' },
          ],
        }),
      });
      const binds = spec.mounts!.filter((m) => ['/h1', '/h2', '/h3', '/h4'].includes(m.source!)).map((m) => m.destination);
      assert.deepEqual(binds, ['/a', '/z/y', '/x/y', '/a/b/c']);
    });

    it('a relative container_path is InvalidArgument', () => {
      throwsKind(() => build({ config: containerConfig({ mounts: [{ containerPath: 'rel', hostPath: '/h' }] }) }), 'InvalidArgument', /must be absolute/);
    });
  });

  describe('namespaces', () => {
    const nsOf = (spec: Spec) => Object.fromEntries(spec.linux!.namespaces!.map((n) => [n.type, n.path ?? 'new']));
    const pidMode = (pid: NamespaceMode) => containerConfig({ linux: { securityContext: { namespaceOptions: { pid } } } });

    it('joins the pod network (pinned netns), ipc and uts; new mount; pid POD → pause', () => {
      assert.deepEqual(nsOf(build()), {
        mount: 'new',
        network: '/run/netns/test',
        uts: `/proc/${PAUSE_PID}/ns/uts`,
        ipc: `/proc/${PAUSE_PID}/ns/ipc`,
        pid: `/proc/${PAUSE_PID}/ns/pid`,
      });
    });

    it('uses /proc/<pause>/ns/net without a pinned netns', () => {
      assert.equal(nsOf(build({ sandbox: { netnsPath: undefined } })).network, `/proc/${PAUSE_PID}/ns/net`);
    });

    it('pid CONTAINER → new, NODE → host, TARGET → the target container', () => {
      assert.equal(nsOf(build({ config: pidMode(NamespaceMode.CONTAINER) })).pid, 'new');
      assert.equal(nsOf(build({ config: pidMode(NamespaceMode.NODE) })).pid, undefined);
      assert.equal(nsOf(build({ config: pidMode(NamespaceMode.TARGET), targetPid: 777 })).pid, '/proc/777/ns/pid');
      throwsKind(() => build({ config: pidMode(NamespaceMode.TARGET) }), 'InvalidArgument', /TARGET/);
    });

    it('host network and host IPC pods share the host namespaces', () => {
      const pod = podConfig({ linux: { securityContext: { namespaceOptions: { network: NamespaceMode.NODE, ipc: NamespaceMode.NODE, pid: NamespaceMode.NODE } } } });
      assert.deepEqual(nsOf(build({ pod, config: pidMode(NamespaceMode.NODE) })), { mount: 'new' });
    });

    it('a new cgroup namespace on cgroup v2 unless privileged', () => {
      const v2 = testSettings({ cgroups: { cgroupV2: true, swapControllerAvailable: true, hugetlbControllerAvailable: true } });
      assert.equal(nsOf(build({ settings: v2 })).cgroup, 'new');
      assert.equal(nsOf(build()).cgroup, undefined);
      assert.equal(nsOf(build({ settings: v2, pod: privilegedPod(), config: containerConfig({ linux: { securityContext: { privileged: true } } }) })).cgroup, undefined);
    });

    it("joins the pod's user namespace with its id maps, and binds /sys", () => {
      const userns = { mode: NamespaceMode.POD, uids: [{ hostId: 100000, containerId: 0, length: 65536 }], gids: [{ hostId: 100000, containerId: 0, length: 65536 }] };
      const pod = podConfig({ linux: { securityContext: { namespaceOptions: { usernsOptions: userns } } } });
      const spec = build({ pod, config: containerConfig({ linux: { securityContext: { namespaceOptions: { usernsOptions: userns } } } }) });
      assert.equal(nsOf(spec).user, `/proc/${PAUSE_PID}/ns/user`);
      assert.deepEqual(spec.linux!.uidMappings, [{ containerID: 0, hostID: 100000, size: 65536 }]);
      assert.deepEqual(spec.linux!.gidMappings, [{ containerID: 0, hostID: 100000, size: 65536 }]);
      assert.deepEqual(mountAt(spec, '/sys'), { destination: '/sys', type: 'bind', source: '/sys', options: ['rbind', 'rslave', 'rro', 'nosuid', 'nodev', 'noexec'] });
      // A container stating different mappings than its pod is refused.
      const other = { ...userns, uids: [{ hostId: 200000, containerId: 0, length: 65536 }] };
      throwsKind(() => build({ pod, config: containerConfig({ linux: { securityContext: { namespaceOptions: { usernsOptions: other } } } }) }), 'InvalidArgument', /differ/);
    });
  });

  describe('resources and cgroups', () => {
    it('maps CPU, cpuset, memory and swap', () => {
      const spec = build({
        config: containerConfig({
          linux: { resources: { cpuPeriod: 100000n, cpuQuota: 50000n, cpuShares: 512n, cpusetCpus: '0-1', cpusetMems: '0', memoryLimitInBytes: 268435456n } },
        }),
      });
      const r = spec.linux!.resources!;
      assert.deepEqual(r.cpu, { period: 100000, quota: 50000, shares: 512, cpus: '0-1', mems: '0' });
      assert.deepEqual(r.memory, { limit: 268435456, swap: 268435456 });
      assert.deepEqual(r.devices, [{ allow: false, access: 'rwm' }]);
    });

    it('memory_swap_limit_in_bytes sets swap; no swap controller → none', () => {
      const cfg = containerConfig({ linux: { resources: { memoryLimitInBytes: 100n, memorySwapLimitInBytes: 300n } } });
      assert.deepEqual(build({ config: cfg }).linux!.resources!.memory, { limit: 100, swap: 300 });
      const noSwap = testSettings({ cgroups: { cgroupV2: false, swapControllerAvailable: false, hugetlbControllerAvailable: false } });
      assert.deepEqual(build({ config: cfg, settings: noSwap }).linux!.resources!.memory, { limit: 100 });
    });

    it('hugepages need the hugetlb controller; unified needs cgroup v2', () => {
      const huge = containerConfig({ linux: { resources: { hugepageLimits: [{ pageSize: '2MB', limit: 4194304n }] } } });
      throwsKind(() => build({ config: huge }), 'InvalidArgument', /hugetlb/);
      const withHugetlb = testSettings({ cgroups: { cgroupV2: false, swapControllerAvailable: true, hugetlbControllerAvailable: true } });
      assert.deepEqual(build({ config: huge, settings: withHugetlb }).linux!.resources!.hugepageLimits, [{ pageSize: '2MB', limit: 4194304 }]);
      const unified = containerConfig({ linux: { resources: { unified: { 'memory.high': '1000000' } } } });
      throwsKind(() => build({ config: unified }), 'InvalidArgument', /cgroup v2/);
      const bad = (pageSize: string, limit: bigint) => containerConfig({ linux: { resources: { hugepageLimits: [{ pageSize, limit }] } } });
      throwsKind(() => build({ config: bad('2M', 0n), settings: withHugetlb }), 'InvalidArgument', /page size/);
      throwsKind(() => build({ config: bad('2MB', -1n), settings: withHugetlb }), 'InvalidArgument', /negative/);
      const v2 = testSettings({ cgroups: { cgroupV2: true, swapControllerAvailable: true, hugetlbControllerAvailable: true } });
      assert.deepEqual(build({ config: unified, settings: v2 }).linux!.resources!.unified, { 'memory.high': '1000000' });
    });

    it('zero hugepage limits (as the kubelet sends for every page size) need no hugetlb controller and are dropped, once noted', () => {
      const skipped: string[][] = [];
      const settings = testSettings({
        cgroups: { cgroupV2: false, swapControllerAvailable: true, hugetlbControllerAvailable: false, hugepageLimitsSkipped: (s) => skipped.push(s) },
      });
      const zeros = containerConfig({ linux: { resources: { hugepageLimits: [{ pageSize: '2MB', limit: 0n }, { pageSize: '1GB', limit: 0n }] } } });
      assert.equal(build({ config: zeros, settings }).linux!.resources!.hugepageLimits, undefined);
      assert.deepEqual(skipped, [['2MB', '1GB']]);
      const mixed = containerConfig({ linux: { resources: { hugepageLimits: [{ pageSize: '2MB', limit: 0n }, { pageSize: '1GB', limit: 1073741824n }] } } });
      throwsKind(() => build({ config: mixed, settings }), 'InvalidArgument', /1GB=1073741824 cannot be enforced: the hugetlb cgroup controller is missing/);
      // With the controller, zero limits are set as they are (they forbid huge pages).
      const withHugetlb = testSettings({ cgroups: { cgroupV2: false, swapControllerAvailable: true, hugetlbControllerAvailable: true } });
      assert.deepEqual(build({ config: zeros, settings: withHugetlb }).linux!.resources!.hugepageLimits, [
        { pageSize: '2MB', limit: 0 },
        { pageSize: '1GB', limit: 0 },
      ]);
    });

    it('a pids limit from the settings', () => {
      assert.deepEqual(build({ settings: testSettings({ pidsLimit: 1024 }) }).linux!.resources!.pids, { limit: 1024 });
      assert.equal(build().linux!.resources!.pids, undefined);
    });

    it('cgroupsPath under the pod parent per driver', () => {
      assert.equal(build().linux!.cgroupsPath, `/kubepods/pod-uid-1/${CONTAINER_ID}`);
      const systemd = build({ settings: testSettings({ cgroupDriver: 'systemd' }), sandbox: { cgroupParent: 'kubepods-besteffort-poduid1.slice' } });
      assert.equal(systemd.linux!.cgroupsPath, `kubepods-besteffort-poduid1.slice:stove:${CONTAINER_ID}`);
      throwsKind(() => build({ settings: testSettings({ cgroupDriver: 'systemd' }) }), 'InvalidArgument', /not a systemd slice/);
    });
  });

  describe('devices', () => {
    it('adds device nodes and allow rules', () => {
      const spec = build({ host: { devices: [{ containerPath: '/dev/xnull', hostPath: '/dev/null', type: 'c', major: 1, minor: 3, fileMode: 0o666, uid: 0, gid: 0, permissions: 'rw' }] } });
      assert.deepEqual(spec.linux!.devices, [{ path: '/dev/xnull', type: 'c', major: 1, minor: 3, fileMode: 0o666, uid: 0, gid: 0 }]);
      assert.deepEqual(spec.linux!.resources!.devices, [{ allow: false, access: 'rwm' }, { allow: true, type: 'c', major: 1, minor: 3, access: 'rw' }]);
    });

    describe('device_ownership_from_security_context', () => {
      const dev = { containerPath: '/dev/gpu0', hostPath: '/dev/gpu0', type: 'c' as const, major: 195, minor: 0, fileMode: 0o660, uid: 0, gid: 44, permissions: 'rw' };
      const owners = (sc: object, on: boolean, privileged = false) => {
        const spec = build({
          config: containerConfig({ linux: { securityContext: { ...sc, privileged } } }),
          ...(privileged ? { pod: privilegedPod() } : {}),
          host: { devices: [dev], hostDevices: privileged ? [{ ...dev, containerPath: '/dev/sda', hostPath: '/dev/sda', type: 'b', major: 8, gid: 6 }] : [] },
          settings: testSettings({ deviceOwnershipFromSecurityContext: on }),
        });
        return spec.linux!.devices!.map((d) => `${d.path} ${d.uid}:${d.gid}`);
      };
      const both = { runAsUser: { value: 1000n }, runAsGroup: { value: 2000n } };

      it('off (the default): the host owner', () => {
        assert.deepEqual(owners(both, false), ['/dev/gpu0 0:44']);
      });
      it('on: runAsUser and runAsGroup, each where set and not 0 (containerd, CRI-O)', () => {
        assert.deepEqual(owners(both, true), ['/dev/gpu0 1000:2000']);
        assert.deepEqual(owners({ runAsUser: { value: 1000n } }, true), ['/dev/gpu0 1000:44']);
        assert.deepEqual(owners({ runAsGroup: { value: 2000n } }, true), ['/dev/gpu0 0:2000']);
        assert.deepEqual(owners({ runAsUser: { value: 0n }, runAsGroup: { value: 0n } }, true), ['/dev/gpu0 0:44']);
        assert.deepEqual(owners({}, true), ['/dev/gpu0 0:44']);
      });
      it("on: a privileged container's host devices keep the host owner", () => {
        assert.deepEqual(owners(both, true, true), ['/dev/gpu0 1000:2000', '/dev/sda 0:6']);
      });
    });
  });

  describe('seccomp', () => {
    const withSc = (sc: object) => containerConfig({ linux: { securityContext: sc } });

    it('none when nothing is asked (the kubelet sends RuntimeDefault explicitly)', () => {
      assert.equal(build().linux!.seccomp, undefined);
      assert.equal(build({ config: withSc({ seccomp: { profileType: SecurityProfile_ProfileType.Unconfined } }) }).linux!.seccomp, undefined);
      assert.equal(build({ config: withSc({ seccompProfilePath: 'unconfined' }) }).linux!.seccomp, undefined);
    });

    it('RuntimeDefault: deny by default, x86_64 arches, namespace syscalls only with CAP_SYS_ADMIN', () => {
      const spec = build({ config: withSc({ seccomp: { profileType: SecurityProfile_ProfileType.RuntimeDefault } }) });
      const s = spec.linux!.seccomp!;
      assert.equal(s.defaultAction, 'SCMP_ACT_ERRNO');
      assert.deepEqual(s.architectures, ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32']);
      const allowed = new Set(s.syscalls!.filter((r) => r.action === 'SCMP_ACT_ALLOW' && !r.args).flatMap((r) => r.names));
      for (const name of ['read', 'write', 'execve', 'arch_prctl', 'chroot']) assert.ok(allowed.has(name), name);
      for (const name of ['mount', 'sethostname', 'unshare', 'reboot', 'init_module', 'cacheflush']) assert.ok(!allowed.has(name), name);
      const clone = s.syscalls!.find((r) => r.names.includes('clone'))!;
      assert.deepEqual(clone.args, [{ index: 0, value: 0x7e020000, valueTwo: 0, op: 'SCMP_CMP_MASKED_EQ' }]);
      assert.deepEqual(s.syscalls!.find((r) => r.names.includes('clone3')), { names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: 38 });

      const admin = build({ config: withSc({ seccompProfilePath: 'runtime/default', capabilities: { addCapabilities: ['SYS_ADMIN'] } }) }).linux!.seccomp!;
      const adminAllowed = new Set(admin.syscalls!.filter((r) => r.action === 'SCMP_ACT_ALLOW' && !r.args).flatMap((r) => r.names));
      for (const name of ['mount', 'sethostname', 'unshare', 'clone', 'clone3']) assert.ok(adminAllowed.has(name), name);
      assert.ok(!admin.syscalls!.some((r) => r.action === 'SCMP_ACT_ERRNO'));
    });

    it('aarch64 hosts get aarch64 arches and syscalls', () => {
      const s = build({ config: withSc({ seccompProfilePath: 'docker/default' }), settings: testSettings({ seccompArch: 'SCMP_ARCH_AARCH64' }) }).linux!.seccomp!;
      assert.deepEqual(s.architectures, ['SCMP_ARCH_AARCH64', 'SCMP_ARCH_ARM']);
      const names = new Set(s.syscalls!.flatMap((r) => r.names));
      assert.ok(names.has('cacheflush'));
      assert.ok(!names.has('arch_prctl'));
    });

    it('Localhost: the loaded profile; not loaded is an error; relative is InvalidArgument', () => {
      const profile = { defaultAction: 'SCMP_ACT_ALLOW' as const, syscalls: [{ names: ['chmod', 'fchmodat'], action: 'SCMP_ACT_ERRNO' as const }] };
      const spec = build({
        config: withSc({ seccomp: { profileType: SecurityProfile_ProfileType.Localhost, localhostRef: '/profiles/block-chmod.json' } }),
        host: { seccompProfiles: { '/profiles/block-chmod.json': profile } },
      });
      assert.deepEqual(spec.linux!.seccomp, { defaultAction: 'SCMP_ACT_ALLOW', syscalls: [{ names: ['chmod', 'fchmodat'], action: 'SCMP_ACT_ERRNO' }] });
      const deprecated = build({ config: withSc({ seccompProfilePath: 'localhost//profiles/block-chmod.json' }), host: { seccompProfiles: { '/profiles/block-chmod.json': profile } } });
      assert.equal(deprecated.linux!.seccomp!.defaultAction, 'SCMP_ACT_ALLOW');
      throwsKind(() => build({ config: withSc({ seccomp: { profileType: SecurityProfile_ProfileType.Localhost, localhostRef: 'rel.json' } }) }), 'InvalidArgument', /absolute/);
      throwsKind(() => build({ config: withSc({ seccompProfilePath: 'bogus' }) }), 'InvalidArgument', /unknown seccomp profile "bogus"/);
    });
  });

  describe('apparmor', () => {
    const withAa = (sc: object) => containerConfig({ linux: { securityContext: sc } });
    it('on a host without AppArmor: unconfined or unset is fine, anything else is FailedPrecondition', () => {
      assert.equal(build().process!.apparmorProfile, undefined);
      assert.equal(build({ config: withAa({ apparmor: { profileType: SecurityProfile_ProfileType.Unconfined } }) }).process!.apparmorProfile, undefined);
      assert.equal(build({ config: withAa({ apparmorProfile: 'unconfined' }) }).process!.apparmorProfile, undefined);
      throwsKind(() => build({ config: withAa({ apparmor: { profileType: SecurityProfile_ProfileType.RuntimeDefault } }) }), 'FailedPrecondition', /apparmor is not supported/);
      throwsKind(() => build({ config: withAa({ apparmorProfile: 'localhost/my-profile' }) }), 'FailedPrecondition', /apparmor is not supported/);
    });

    it('on a host with AppArmor: Localhost names the profile', () => {
      const spec = build({
        config: withAa({ apparmor: { profileType: SecurityProfile_ProfileType.Localhost, localhostRef: 'localhost/my-profile' } }),
        settings: testSettings({ apparmor: { enabled: true } }),
      });
      assert.equal(spec.process!.apparmorProfile, 'my-profile');
    });
  });

  it('annotations: the allowed CRI ones, then io.kubernetes.cri.* that cannot be spoofed', () => {
    const annotations = { mine: '1', 'run.oci.handler': 'x', 'io.example/a': '2', 'io.example/b': '3', [ANNOTATIONS.containerType]: 'sandbox' };
    const settings = testSettings({ allowedAnnotations: ['mine', 'io.example/*', ANNOTATIONS.containerType] });
    const spec = build({ config: containerConfig({ annotations }), settings });
    assert.deepEqual(spec.annotations, {
      mine: '1',
      'io.example/a': '2',
      'io.example/b': '3',
      [ANNOTATIONS.containerType]: 'container',
      [ANNOTATIONS.sandboxId]: SANDBOX_ID,
      [ANNOTATIONS.sandboxName]: 'pod',
      [ANNOTATIONS.sandboxNamespace]: 'ns',
      [ANNOTATIONS.sandboxUid]: 'uid-1',
      [ANNOTATIONS.containerName]: 'app',
      [ANNOTATIONS.imageName]: 'docker.io/library/busybox:latest',
    });
    // Nothing from the request by default (runtime.allowed_annotations = []).
    const plain = build({ config: containerConfig({ annotations }) });
    assert.deepEqual(Object.keys(plain.annotations!).filter((k) => !k.startsWith('io.kubernetes.cri.')), []);
  });

  it('is JSON-serialisable as-is and deterministic', () => {
    const a = JSON.stringify(build());
    assert.equal(a, JSON.stringify(build()));
    assert.equal(JSON.parse(a).ociVersion, '1.0.2-dev');
  });
});
