/**
 * The defaults every Linux container spec starts from (architecture-anchors §5), with their sources.
 * Constants only; the builders copy them before changing anything.
 */
import type { Mount } from './types.js';

/** The runtime-spec version written into config.json (what runc 1.1 reports as its maximum). */
export const OCI_VERSION = '1.0.2-dev';

/** Default PATH for containers (containerd `oci.WithDefaultPathEnv`, Docker's default). */
export const DEFAULT_PATH_ENV = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * Paths hidden from a non-privileged container: the kubelet's default list (kubernetes
 * `pkg/securitycontext/util.go`), which is also containerd's base spec list.
 */
export const DEFAULT_MASKED_PATHS: readonly string[] = [
  '/proc/asound',
  '/proc/acpi',
  '/proc/kcore',
  '/proc/keys',
  '/proc/latency_stats',
  '/proc/timer_list',
  '/proc/timer_stats',
  '/proc/sched_debug',
  '/proc/scsi',
  '/sys/firmware',
  '/sys/devices/virtual/powercap',
];

/** Paths made read-only in a non-privileged container (same sources). */
export const DEFAULT_READONLY_PATHS: readonly string[] = [
  '/proc/bus',
  '/proc/fs',
  '/proc/irq',
  '/proc/sys',
  '/proc/sysrq-trigger',
];

/**
 * The standard mounts of a Linux container (containerd `pkg/oci/mounts.go` = runtime-tools), without
 * `/run` (containerd drops it for CRI containers) and without `/dev/shm` (pods bind their own).
 */
export function standardMounts(): Mount[] {
  return [
    { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
    { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
    {
      destination: '/dev/pts',
      type: 'devpts',
      source: 'devpts',
      options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620', 'gid=5'],
    },
    { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
    { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
  ];
}

/** `/sys/fs/cgroup` for app containers (containerd `withMounts`): read-only unless privileged. */
export function cgroupMount(writable: boolean): Mount {
  return {
    destination: '/sys/fs/cgroup',
    type: 'cgroup',
    source: 'cgroup',
    options: ['nosuid', 'noexec', 'nodev', 'relatime', writable ? 'rw' : 'ro'],
  };
}

/**
 * `/sys` as a recursive read-only bind of the host's, for containers in a user namespace that do not own
 * their network namespace: mounting a fresh sysfs there fails with EPERM (containerd does the same for
 * host-network pods with a user namespace).
 */
export function sysBindMount(): Mount {
  // rslave: the bind holds the host's /sys/fs/cgroup, a shared mount; the runtime then mounts the
  // container's cgroup at /sys/fs/cgroup, which must not propagate back to the host (crun 1.8.1 does not
  // make the container's mounts private first: the host got the mount, and the container's cgroup
  // could not be removed).
  return { destination: '/sys', type: 'bind', source: '/sys', options: ['rbind', 'rslave', 'rro', 'nosuid', 'nodev', 'noexec'] };
}

/** Every Linux capability by number (linux/capability.h), for "ALL" and privileged containers. */
export const ALL_CAPABILITIES: readonly string[] = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_DAC_READ_SEARCH',
  'CAP_FOWNER',
  'CAP_FSETID',
  'CAP_KILL',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETPCAP',
  'CAP_LINUX_IMMUTABLE',
  'CAP_NET_BIND_SERVICE',
  'CAP_NET_BROADCAST',
  'CAP_NET_ADMIN',
  'CAP_NET_RAW',
  'CAP_IPC_LOCK',
  'CAP_IPC_OWNER',
  'CAP_SYS_MODULE',
  'CAP_SYS_RAWIO',
  'CAP_SYS_CHROOT',
  'CAP_SYS_PTRACE',
  'CAP_SYS_PACCT',
  'CAP_SYS_ADMIN',
  'CAP_SYS_BOOT',
  'CAP_SYS_NICE',
  'CAP_SYS_RESOURCE',
  'CAP_SYS_TIME',
  'CAP_SYS_TTY_CONFIG',
  'CAP_MKNOD',
  'CAP_LEASE',
  'CAP_AUDIT_WRITE',
  'CAP_AUDIT_CONTROL',
  'CAP_SETFCAP',
  'CAP_MAC_OVERRIDE',
  'CAP_MAC_ADMIN',
  'CAP_SYSLOG',
  'CAP_WAKE_ALARM',
  'CAP_BLOCK_SUSPEND',
  'CAP_AUDIT_READ',
  'CAP_PERFMON',
  'CAP_BPF',
  'CAP_CHECKPOINT_RESTORE',
];

/** Pause container facts shared by containerd and CRI-O. */
export const PAUSE_OOM_SCORE_ADJ = -998;
export const PAUSE_CPU_SHARES = 2;
/** Where the pause program lives inside `rootfs/pause` (built by `make rootfs`). */
export const PAUSE_COMMAND = '/bin/pause';

/** Sysctls containerd adds to pod-network pods unless the pod sets them. */
export const POD_NETWORK_DEFAULT_SYSCTLS: Readonly<Record<string, string>> = {
  'net.ipv4.ip_unprivileged_port_start': '0',
  'net.ipv4.ping_group_range': '0 2147483647',
};
