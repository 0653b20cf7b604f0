import assert from 'node:assert/strict';
import { NamespaceMode, SecurityProfile_ProfileType, type PodSandboxConfig } from '../../../src/gen/runtime/v1/api.js';
import { buildPauseSpec, type PauseSpecInput } from '../../../src/oci/pause-spec.js';
import { ANNOTATIONS } from '../../../src/oci/annotations.js';
import { DEFAULT_MASKED_PATHS } from '../../../src/oci/defaults.js';
import { validateSysctls, normalizeSysctlName } from '../../../src/oci/sysctls.js';
import type { Spec } from '../../../src/oci/types.js';
import { podConfig, SANDBOX_ID, testSettings } from './fixtures.js';
import { throwsKind } from './helpers.js';

const SHM = `/run/stove/sandboxes/${SANDBOX_ID}/shm`;

function pause(config: PodSandboxConfig = podConfig(), over: Partial<PauseSpecInput> = {}): Spec {
  return buildPauseSpec({
    sandboxId: SANDBOX_ID,
    config,
    rootPath: '/opt/stove/rootfs/pause',
    hostname: config.hostname || 'node',
    netnsPath: '/run/netns/cni-1234',
    shmPath: SHM,
    cgroupParent: '/kubepods/pod-uid-1',
    settings: testSettings(),
    ...over,
  });
}

const nsOf = (spec: Spec) => Object.fromEntries(spec.linux!.namespaces!.map((n) => [n.type, n.path ?? 'new']));
const hostNs = (opts: object) => podConfig({ linux: { securityContext: { namespaceOptions: opts } } });

describe('buildPauseSpec', () => {
  it('pod network: read-only pause rootfs, /bin/pause, hostname, pinned netns', () => {
    const spec = pause();
    assert.deepEqual(spec.root, { path: '/opt/stove/rootfs/pause', readonly: true });
    assert.deepEqual(spec.process!.args, ['/bin/pause']);
    assert.equal(spec.process!.cwd, '/');
    assert.equal(spec.process!.noNewPrivileges, true);
    assert.equal(spec.process!.rlimits, undefined);
    assert.equal(spec.hostname, 'pod-host');
    assert.deepEqual(nsOf(spec), { pid: 'new', ipc: 'new', uts: 'new', network: '/run/netns/cni-1234', mount: 'new' });
    assert.deepEqual(spec.linux!.maskedPaths, DEFAULT_MASKED_PATHS);
  });

  it('mounts the pod /dev/shm read-only and no cgroupfs', () => {
    const spec = pause();
    assert.deepEqual(spec.mounts!.find((m) => m.destination === '/dev/shm'), {
      destination: '/dev/shm',
      type: 'bind',
      source: SHM,
      options: ['rbind', 'ro', 'nosuid', 'nodev', 'noexec'],
    });
    assert.deepEqual(spec.mounts!.map((m) => m.destination), ['/proc', '/dev', '/dev/pts', '/dev/mqueue', '/sys', '/dev/shm']);
  });

  it('CPU shares 2, OOM score -998 clamped to the daemon floor, cgroup path under the parent', () => {
    const spec = pause();
    assert.equal(spec.linux!.resources!.cpu!.shares, 2);
    assert.equal(spec.process!.oomScoreAdj, 0, 'clamped: the test settings floor is 0');
    assert.equal(pause(podConfig(), { settings: testSettings({ clampOomScoreAdj: (n) => n }) }).process!.oomScoreAdj, -998);
    assert.equal(spec.linux!.cgroupsPath, `/kubepods/pod-uid-1/${SANDBOX_ID}`);
  });

  it('pod network sysctls: unprivileged ports and ping by default, pod values win', () => {
    assert.deepEqual(pause().linux!.sysctl, { 'net.ipv4.ip_unprivileged_port_start': '0', 'net.ipv4.ping_group_range': '0 2147483647' });
    const spec = pause(podConfig({ linux: { sysctls: { 'net.ipv4.ip_unprivileged_port_start': '1024', 'kernel.shm_rmid_forced': '1' } } }));
    assert.deepEqual(spec.linux!.sysctl, {
      'net.ipv4.ip_unprivileged_port_start': '1024',
      'kernel.shm_rmid_forced': '1',
      'net.ipv4.ping_group_range': '0 2147483647',
    });
  });

  it('host network: no network or uts namespace, no hostname, no net sysctls', () => {
    const spec = pause(hostNs({ network: NamespaceMode.NODE }), { netnsPath: undefined });
    assert.deepEqual(nsOf(spec), { pid: 'new', ipc: 'new', mount: 'new' });
    assert.equal(spec.hostname, undefined);
    assert.equal(spec.linux!.sysctl, undefined);
    throwsKind(
      () => pause(podConfig({ linux: { sysctls: { 'net.core.somaxconn': '1024' }, securityContext: { namespaceOptions: { network: NamespaceMode.NODE } } } }), { netnsPath: undefined }),
      'InvalidArgument',
      /host network/,
    );
  });

  it('host PID and host IPC drop those namespaces', () => {
    assert.deepEqual(nsOf(pause(hostNs({ pid: NamespaceMode.NODE, ipc: NamespaceMode.NODE }), { shmPath: '/dev/shm' })), {
      uts: 'new',
      network: '/run/netns/cni-1234',
      mount: 'new',
    });
  });

  it('without a pinned netns the pause container gets a new network namespace', () => {
    assert.equal(nsOf(pause(podConfig(), { netnsPath: undefined })).network, 'new');
  });

  it('user namespace POD: new user namespace with the id maps, /sys bound, no ping_group_range', () => {
    const userns = { mode: NamespaceMode.POD, uids: [{ hostId: 1000, containerId: 0, length: 100000 }], gids: [{ hostId: 1000, containerId: 0, length: 100000 }] };
    const spec = pause(hostNs({ usernsOptions: userns }));
    assert.equal(nsOf(spec).user, 'new');
    assert.deepEqual(spec.linux!.uidMappings, [{ containerID: 0, hostID: 1000, size: 100000 }]);
    assert.equal(spec.mounts!.find((m) => m.destination === '/sys')!.type, 'bind');
    assert.deepEqual(spec.linux!.sysctl, { 'net.ipv4.ip_unprivileged_port_start': '0' });
    throwsKind(() => pause(hostNs({ usernsOptions: { mode: NamespaceMode.POD } })), 'InvalidArgument', /needs uid and gid mappings/);
  });

  it('refuses user namespace mappings the kernel would not take (critest: two mappings, container id 0 unmapped)', () => {
    const pod = (uids: { containerId: number; hostId: number; length: number }[]) =>
      pause(hostNs({ usernsOptions: { mode: NamespaceMode.POD, uids, gids: [{ containerId: 0, hostId: 1000, length: 100000 }] } }));
    throwsKind(() => pod([{ containerId: 0, hostId: 1000, length: 100000 }, { containerId: 0, hostId: 2000, length: 100000 }]), 'InvalidArgument', /userns_options\.uids\[1\] overlaps uids\[0\]/);
    throwsKind(() => pod([{ containerId: 1, hostId: 1000, length: 100000 }]), 'InvalidArgument', /userns_options\.uids must map container id 0/);
    throwsKind(() => pod([{ containerId: 0, hostId: 1000, length: 0 }]), 'InvalidArgument', /not a range of 32-bit ids/);
    throwsKind(() => pod([{ containerId: 0, hostId: 2 ** 32 - 10, length: 100 }]), 'InvalidArgument', /not a range of 32-bit ids/);
    // Several disjoint ranges are fine.
    const spec = pod([{ containerId: 0, hostId: 100000, length: 1000 }, { containerId: 1000, hostId: 300000, length: 1000 }]);
    assert.equal(spec.linux!.uidMappings!.length, 2);
  });

  it('run_as_user, run_as_group and supplemental groups of the sandbox', () => {
    const spec = pause(podConfig({ linux: { securityContext: { runAsUser: { value: 65535n }, runAsGroup: { value: 65535n }, supplementalGroups: [5n] } } }));
    assert.deepEqual(spec.process!.user, { uid: 65535, gid: 65535, additionalGids: [5, 65535] });
    throwsKind(() => pause(podConfig({ linux: { securityContext: { runAsGroup: { value: 1n } } } })), 'InvalidArgument', /run_as_group/);
  });

  it('seccomp of the sandbox; privileged sandboxes are unconfined and unmasked', () => {
    const rd = pause(podConfig({ linux: { securityContext: { seccomp: { profileType: SecurityProfile_ProfileType.RuntimeDefault } } } }));
    assert.equal(rd.linux!.seccomp!.defaultAction, 'SCMP_ACT_ERRNO');
    assert.equal(pause().linux!.seccomp, undefined);
    const priv = pause(podConfig({ linux: { securityContext: { privileged: true, seccomp: { profileType: SecurityProfile_ProfileType.RuntimeDefault } } } }));
    assert.equal(priv.linux!.seccomp, undefined);
    assert.equal(priv.linux!.maskedPaths, undefined);
  });

  it('annotations mark the sandbox; the request\'s pass only through runtime.allowed_annotations', () => {
    assert.equal(pause(podConfig({ annotations: { a: 'b' } })).annotations!.a, undefined);
    const spec = pause(podConfig({ annotations: { a: 'b', c: 'd' } }), { settings: testSettings({ allowedAnnotations: ['a'] }) });
    assert.equal(spec.annotations!.a, 'b');
    assert.equal(spec.annotations!.c, undefined);
    assert.equal(spec.annotations![ANNOTATIONS.containerType], 'sandbox');
    assert.equal(spec.annotations![ANNOTATIONS.sandboxId], SANDBOX_ID);
    assert.equal(spec.annotations![ANNOTATIONS.sandboxLogDirectory], '/var/log/pods/ns_pod_uid-1');
  });
});

describe('validateSysctls', () => {
  const pod = { hostNetwork: false, hostIpc: false };
  const ok: [string, string][] = [
    ['kernel.shm_rmid_forced', 'kernel.shm_rmid_forced'],
    ['kernel.shmmax', 'kernel.shmmax'],
    ['kernel.msgmax', 'kernel.msgmax'],
    ['kernel.sem', 'kernel.sem'],
    ['fs.mqueue.msg_max', 'fs.mqueue.msg_max'],
    ['net.ipv4.ip_local_port_range', 'net.ipv4.ip_local_port_range'],
    ['net/ipv4/conf/eth0.100/rp_filter', 'net.ipv4.conf.eth0/100.rp_filter'],
  ];
  for (const [raw, want] of ok) {
    it(`accepts ${raw}`, () => assert.deepEqual(validateSysctls({ [raw]: '1' }, pod), { [want]: '1' }));
  }

  const bad: [string, { hostNetwork: boolean; hostIpc: boolean }, RegExp][] = [
    ['kernel.hostname', pod, /not namespaced/],
    ['vm.swappiness', pod, /not namespaced/],
    ['kernel.semx', pod, /not namespaced/],
    ['fs.mqueue', pod, /not namespaced/],
    ['net.ipv4.ip_forward', { hostNetwork: true, hostIpc: false }, /host network/],
    ['kernel.shmmax', { hostNetwork: false, hostIpc: true }, /host IPC/],
    ['Net.Bad', pod, /invalid sysctl name/],
  ];
  for (const [name, p, re] of bad) {
    it(`refuses ${name}${p.hostNetwork ? ' with host network' : p.hostIpc ? ' with host IPC' : ''}`, () => throwsKind(() => validateSysctls({ [name]: '1' }, p), 'InvalidArgument', re));
  }

  it('normalises slash-separated names', () => {
    assert.equal(normalizeSysctlName('net/ipv4/ip_forward'), 'net.ipv4.ip_forward');
    assert.equal(normalizeSysctlName('net.ipv4.conf.eth0/100.rp_filter'), 'net.ipv4.conf.eth0/100.rp_filter');
  });
});
