/**
 * Stove's default AppArmor profile, `stove-default`: what a container that asks for RuntimeDefault (or
 * for nothing) runs under on an AppArmor host. Written from the profile containerd loads as
 * `cri-containerd.apparmor.d` (contrib/apparmor/template.go) and CRI-O as `crio-default`
 * (containers/common pkg/apparmor), which both descend from Docker's `docker-default`: everything a
 * container's own files and network need is allowed, and what reaches the host's kernel through /proc
 * and /sys is not (docs/security.md compares the three).
 *
 * Pure: `host-apparmor.ts` gathers the facts (which include files exist, the daemon's own profile) and
 * loads the text with apparmor_parser.
 */

import { failedPrecondition } from '../common/errors.js';

/** The name Stove loads its default profile under. */
export const STOVE_APPARMOR_PROFILE = 'stove-default';

export interface AppArmorProfileFacts {
  /** The profile's name (also the peer its processes may signal and trace). */
  name: string;
  /**
   * `/etc/apparmor.d/abi/3.0` exists: the profile pins policy ABI 3.0, under which `network,` still
   * covers unix sockets (under ABI 4.0 it does not, and every container would lose them).
   */
  abi3: boolean;
  /** `/etc/apparmor.d/tunables/global` exists (it defines `@{PROC}`); else `@{PROC}` is set here. */
  tunables: boolean;
  /** `/etc/apparmor.d/abstractions/base` exists (shared libraries, /dev/null, locale…). */
  baseAbstraction: boolean;
  /** The profile the daemon runs under (`unconfined` unless Stove itself is confined). */
  daemonProfile: string;
}

/**
 * A profile name Stove writes into a profile's text or compares with the kernel's list: letters, digits
 * and `._-`, plus `/`, `:` and `+` after the first character (path-attached profiles such as
 * `/usr/bin/stove`). No space, glob character, quote or control character, at most 255 bytes.
 */
const PROFILE_NAME = /^[A-Za-z0-9/_][A-Za-z0-9._\-/:+]{0,254}$/;

export function isPlainProfileName(name: string): boolean {
  return PROFILE_NAME.test(name) && !name.includes('//');
}

/**
 * The daemon's profile from `/proc/self/attr/current` ("name (mode)" or "unconfined"); `unconfined` when
 * it is empty or not a plain name (nothing is then added for it).
 */
export function daemonProfileFrom(attrCurrent: string): string {
  const name = attrCurrent.replace(/\0/g, '').trim().split(' ')[0] ?? '';
  return name && isPlainProfileName(name) ? name : 'unconfined';
}

/** The text of the default profile, for `apparmor_parser -Kr` on stdin. */
export function renderAppArmorProfile(f: AppArmorProfileFacts): string {
  // The name comes from runtime.apparmor_default_profile, checked when the configuration loads.
  if (!isPlainProfileName(f.name)) throw failedPrecondition(`runtime.apparmor_default_profile ${JSON.stringify(f.name)} is not a plain AppArmor profile name`);
  const lines: string[] = [
    `# ${f.name}: Stove's default AppArmor profile for containers (RuntimeDefault, or no profile asked for).`,
    '# Loaded by stove serve with apparmor_parser -Kr when the kernel does not have it; see docs/security.md.',
  ];
  if (f.abi3) lines.push('abi <abi/3.0>,');
  lines.push(f.tunables ? '#include <tunables/global>' : '@{PROC}=/proc/', '');
  lines.push(`profile ${f.name} flags=(attach_disconnected,mediate_deleted) {`);
  if (f.baseAbstraction) lines.push('  #include <abstractions/base>', '');
  lines.push(
    '  network,',
    '  capability,',
    '  file,',
    '  umount,',
    '',
    '  # Signals: from the host\'s unconfined processes (conmon, the kubelet, an operator), from the OCI',
    '  # runtimes\' own profiles where the distribution ships them, and among the container\'s processes.',
    '  signal (receive) peer=unconfined,',
    '  signal (receive) peer=runc,',
    '  signal (receive) peer=crun,',
  );
  if (f.daemonProfile !== 'unconfined' && isPlainProfileName(f.daemonProfile) && f.daemonProfile !== f.name) {
    lines.push(`  signal (receive) peer=${f.daemonProfile},`);
  }
  lines.push(
    `  signal (send,receive) peer=${f.name},`,
    '',
    '  # /proc: no writes to its own files, nor below its directories but /proc/<pid> and /proc/sys; in',
    '  # /proc/sys only below kernel/, to shm* and the few keys the pattern lets through (the peers\' rules);',
    '  # never the SysRq trigger or kernel memory.',
    '  deny @{PROC}/* w,',
    '  deny @{PROC}/{[^1-9/],[^1-9/][^0-9/],[^1-9s/][^0-9y/][^0-9s/],[^1-9/][^0-9/][^0-9/][^0-9/]*}/** w,',
    '  deny @{PROC}/sys/[^k]** w,',
    '  deny @{PROC}/sys/kernel/{?,??,[^s][^h][^m]**} w,',
    '  deny @{PROC}/sysrq-trigger rwklx,',
    '  deny @{PROC}/kcore rwklx,',
    '',
    '  deny mount,',
    '',
    '  # /sys: writes only below /sys/fs/cgroup; firmware, power capping and the LSMs\' own files not at all.',
    '  deny /sys/[^f]*/** wklx,',
    '  deny /sys/f[^s]*/** wklx,',
    '  deny /sys/fs/[^c]*/** wklx,',
    '  deny /sys/fs/c[^g]*/** wklx,',
    '  deny /sys/fs/cg[^r]*/** wklx,',
    '  deny /sys/firmware/** rwklx,',
    '  deny /sys/devices/virtual/powercap/** rwklx,',
    '  deny /sys/kernel/security/** rwklx,',
    '',
    '  # ptrace (and reading /proc/<pid>/ of another process, as ps does) only of processes under this',
    '  # same profile, where capabilities, seccomp and Yama allow it.',
    `  ptrace (trace,tracedby,read,readby) peer=${f.name},`,
    '}',
    '',
  );
  return lines.join('\n');
}
