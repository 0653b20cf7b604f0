/**
 * Reading /proc and /sys facts: mountinfo (for mount propagation checks and cgroup mounts), the
 * daemon's capabilities and OOM score, AppArmor. Parsers are pure and exported for tests.
 */
import { access, readFile } from 'node:fs/promises';
import { posix } from 'node:path';

/** One line of /proc/<pid>/mountinfo. */
export interface MountInfo {
  id: number;
  parentId: number;
  /** `major:minor` of the filesystem. */
  device: string;
  /** The path inside the filesystem that is mounted (for bind mounts and cgroup namespaces). */
  root: string;
  mountPoint: string;
  /** Per-mount options (`rw,nosuid,relatime`). */
  options: string[];
  /** Optional fields: `shared:N`, `master:N`, `propagate_from:N`, `unbindable`. */
  optional: string[];
  fsType: string;
  source: string;
  /** Per-superblock options (cgroup v1: the controllers, e.g. `rw,cpu`). */
  superOptions: string[];
}

/** Decodes mountinfo's octal escapes (`\040` for a space). */
function unescape(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_m, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

/** Parses mountinfo text; malformed lines are skipped. */
export function parseMountInfo(text: string): MountInfo[] {
  const out: MountInfo[] = [];
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    const f = line.split(' ');
    const sep = f.indexOf('-', 6);
    if (f.length < 10 || sep < 0) continue;
    out.push({
      id: Number(f[0]),
      parentId: Number(f[1]),
      device: f[2]!,
      root: unescape(f[3]!),
      mountPoint: unescape(f[4]!),
      options: f[5]!.split(','),
      optional: f.slice(6, sep).filter(Boolean),
      fsType: f[sep + 1]!,
      source: unescape(f[sep + 2] ?? ''),
      superOptions: (f[sep + 3] ?? '').split(',').filter(Boolean),
    });
  }
  return out;
}

/** Reads and parses /proc/self/mountinfo (or another pid's). */
export async function readMountInfo(pid: number | 'self' = 'self'): Promise<MountInfo[]> {
  return parseMountInfo(await readFile(`/proc/${pid}/mountinfo`, 'utf8'));
}

/**
 * The mount that holds `path` (already symlink-resolved and absolute): the longest mount point that is
 * `path` or a parent of it; of several mounts on one point, the last (topmost) one.
 */
export function mountContaining(mounts: readonly MountInfo[], path: string): MountInfo | undefined {
  const p = posix.normalize(path);
  let best: MountInfo | undefined;
  for (const m of mounts) {
    const mp = m.mountPoint;
    const inside = p === mp || mp === '/' || p.startsWith(mp.endsWith('/') ? mp : `${mp}/`);
    if (inside && (!best || mp.length >= best.mountPoint.length)) best = m;
  }
  return best;
}

/** Mount propagation of a mount: shared wins over slave (a mount can be both: `shared:N master:M`). */
export function propagationOf(m: MountInfo): 'shared' | 'slave' | 'private' {
  if (m.optional.some((tag) => tag.startsWith('shared:'))) return 'shared';
  if (m.optional.some((tag) => tag.startsWith('master:'))) return 'slave';
  return 'private';
}

/** Capability names by bit number (linux/capability.h). */
const CAP_NAMES = [
  'CAP_CHOWN', 'CAP_DAC_OVERRIDE', 'CAP_DAC_READ_SEARCH', 'CAP_FOWNER', 'CAP_FSETID', 'CAP_KILL', 'CAP_SETGID',
  'CAP_SETUID', 'CAP_SETPCAP', 'CAP_LINUX_IMMUTABLE', 'CAP_NET_BIND_SERVICE', 'CAP_NET_BROADCAST', 'CAP_NET_ADMIN',
  'CAP_NET_RAW', 'CAP_IPC_LOCK', 'CAP_IPC_OWNER', 'CAP_SYS_MODULE', 'CAP_SYS_RAWIO', 'CAP_SYS_CHROOT',
  'CAP_SYS_PTRACE', 'CAP_SYS_PACCT', 'CAP_SYS_ADMIN', 'CAP_SYS_BOOT', 'CAP_SYS_NICE', 'CAP_SYS_RESOURCE',
  'CAP_SYS_TIME', 'CAP_SYS_TTY_CONFIG', 'CAP_MKNOD', 'CAP_LEASE', 'CAP_AUDIT_WRITE', 'CAP_AUDIT_CONTROL',
  'CAP_SETFCAP', 'CAP_MAC_OVERRIDE', 'CAP_MAC_ADMIN', 'CAP_SYSLOG', 'CAP_WAKE_ALARM', 'CAP_BLOCK_SUSPEND',
  'CAP_AUDIT_READ', 'CAP_PERFMON', 'CAP_BPF', 'CAP_CHECKPOINT_RESTORE',
];

/** Capability names in a hex mask from /proc/<pid>/status (bits this table does not know are skipped). */
export function capabilitiesFromMask(hex: string): string[] {
  const mask = BigInt(`0x${hex.trim()}`);
  return CAP_NAMES.filter((_name, bit) => (mask >> BigInt(bit)) & 1n);
}

/** The daemon's bounding set: what it can hand to containers ("ALL", privileged). */
export async function ownBoundingCapabilities(): Promise<string[]> {
  const status = await readFile('/proc/self/status', 'utf8');
  const line = status.split('\n').find((l) => l.startsWith('CapBnd:'));
  return line ? capabilitiesFromMask(line.slice('CapBnd:'.length)) : [];
}

/** The daemon's effective set: what it may do itself (CAP_SYS_RESOURCE: lower a child's OOM score). */
export async function ownEffectiveCapabilities(): Promise<string[]> {
  const status = await readFile('/proc/self/status', 'utf8');
  const line = status.split('\n').find((l) => l.startsWith('CapEff:'));
  return line ? capabilitiesFromMask(line.slice('CapEff:'.length)) : [];
}

/** The daemon's own oom_score_adj: the lowest score it can give a child without CAP_SYS_RESOURCE. */
export async function ownOomScoreAdj(): Promise<number> {
  const text = await readFile('/proc/self/oom_score_adj', 'utf8');
  const n = Number(text.trim());
  return Number.isInteger(n) ? n : 0;
}

/** Where the kernel lists the loaded AppArmor profiles, one `name (mode)` a line (securityfs, root only). */
export const APPARMOR_PROFILES_FILE = '/sys/kernel/security/apparmor/profiles';

/**
 * True when AppArmor is enabled and its securityfs is there to load and list profiles: runc's test
 * (`/sys/kernel/security/apparmor` exists and `/sys/module/apparmor/parameters/enabled` is `Y`).
 */
export async function appArmorEnabled(): Promise<boolean> {
  try {
    await access('/sys/kernel/security/apparmor');
    return (await readFile('/sys/module/apparmor/parameters/enabled', 'utf8')).trim().startsWith('Y');
  } catch {
    return false;
  }
}

/** The mode (`enforce`, `complain`…) of a loaded AppArmor profile of this name, or undefined when none is loaded. */
export async function appArmorProfileMode(name: string): Promise<string | undefined> {
  let text: string;
  try {
    text = await readFile(APPARMOR_PROFILES_FILE, 'utf8');
  } catch {
    return undefined;
  }
  return appArmorModeIn(text, name);
}

/** The mode of `name` in the profiles file's text (pure, for tests). */
export function appArmorModeIn(profilesText: string, name: string): string | undefined {
  const prefix = `${name} (`;
  const line = profilesText.split('\n').find((l) => l.startsWith(prefix) && l.endsWith(')'));
  return line?.slice(prefix.length, -1);
}

/** True when an AppArmor profile of this name is loaded. */
export async function appArmorProfileLoaded(name: string): Promise<boolean> {
  return (await appArmorProfileMode(name)) !== undefined;
}
