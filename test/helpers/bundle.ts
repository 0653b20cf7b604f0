/**
 * OCI bundles for tests: a root filesystem made of Debian's busybox-static (`/bin/busybox` plus a
 * symlink per applet) and a hand-written minimal runtime spec, close to what `runc spec` produces for
 * root. One read-only rootfs is shared by every bundle made under the same base dir; `/tmp` is a tmpfs.
 */
import { execFileSync } from 'node:child_process';
import { copyFile, mkdir, symlink, writeFile, access } from 'node:fs/promises';
import { join } from 'node:path';

export const BUSYBOX = '/bin/busybox';

export interface BundleOptions {
  /** The container's command line. */
  args: string[];
  /** Run on a terminal (`process.terminal`). */
  tty?: boolean;
  env?: string[];
  cwd?: string;
  /** Memory limit in bytes (swap limited to the same, so the OOM killer acts). */
  memoryLimit?: number;
  hostname?: string;
  /** Last changes to the spec before it is written. */
  edit?: (spec: OciSpec) => void;
}

/** The parts of an OCI runtime spec tests touch. */
export interface OciSpec {
  ociVersion: string;
  process: { args: string[]; terminal: boolean; env: string[]; cwd: string; [k: string]: unknown };
  root: { path: string; readonly: boolean };
  linux: { resources: Record<string, unknown>; [k: string]: unknown };
  [k: string]: unknown;
}

export interface Bundle {
  dir: string;
  spec: OciSpec;
}

/** True when busybox-static is installed (tests skip with a reason otherwise). */
export async function haveBusybox(): Promise<boolean> {
  try {
    await access(BUSYBOX);
    return true;
  } catch {
    return false;
  }
}

/** Creates `<base>/rootfs` once: busybox and its applet links in /bin, empty mount points. */
export async function ensureRootfs(base: string): Promise<string> {
  const rootfs = join(base, 'rootfs');
  try {
    await access(join(rootfs, 'bin', 'sh'));
    return rootfs;
  } catch {
    // build it
  }
  for (const d of ['bin', 'proc', 'sys', 'dev', 'tmp', 'etc', 'root']) await mkdir(join(rootfs, d), { recursive: true });
  await copyFile(BUSYBOX, join(rootfs, 'bin', 'busybox'));
  const applets = execFileSync(BUSYBOX, ['--list'], { encoding: 'utf8' }).split('\n').filter((a) => a && a !== 'busybox');
  await Promise.all(applets.map((a) => symlink('busybox', join(rootfs, 'bin', a)).catch(() => {})));
  await writeFile(join(rootfs, 'etc', 'passwd'), 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n');
  await writeFile(join(rootfs, 'etc', 'group'), 'root:x:0:\nnogroup:x:65534:\n');
  return rootfs;
}

/** The spec for a bundle; `rootfs` is an absolute path. */
export function bundleSpec(rootfs: string, opts: BundleOptions): OciSpec {
  const caps = ['CAP_AUDIT_WRITE', 'CAP_KILL', 'CAP_NET_BIND_SERVICE', 'CAP_CHOWN', 'CAP_SETUID', 'CAP_SETGID'];
  const resources: Record<string, unknown> = { devices: [{ allow: false, access: 'rwm' }] };
  if (opts.memoryLimit) resources['memory'] = { limit: opts.memoryLimit, swap: opts.memoryLimit };
  const spec: OciSpec = {
    ociVersion: '1.0.2-dev',
    process: {
      terminal: opts.tty ?? false,
      user: { uid: 0, gid: 0 },
      args: opts.args,
      env: opts.env ?? ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'TERM=xterm'],
      cwd: opts.cwd ?? '/',
      capabilities: { bounding: caps, effective: caps, permitted: caps },
      rlimits: [{ type: 'RLIMIT_NOFILE', hard: 1024, soft: 1024 }],
      noNewPrivileges: true,
    },
    root: { path: rootfs, readonly: true },
    hostname: opts.hostname ?? 'stove-test',
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc' },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
      { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620', 'gid=5'] },
      { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
      { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
      { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
      { destination: '/tmp', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=1777', 'size=16m'] },
    ],
    linux: {
      resources,
      namespaces: [{ type: 'pid' }, { type: 'network' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }],
      maskedPaths: ['/proc/acpi', '/proc/kcore', '/proc/keys', '/proc/timer_list', '/sys/firmware'],
      readonlyPaths: ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'],
    },
  };
  opts.edit?.(spec);
  return spec;
}

/** Writes `<base>/bundles/<name>/config.json` over the shared busybox rootfs. */
export async function makeBundle(base: string, name: string, opts: BundleOptions): Promise<Bundle> {
  const rootfs = await ensureRootfs(base);
  const dir = join(base, 'bundles', name);
  await mkdir(dir, { recursive: true });
  const spec = bundleSpec(rootfs, opts);
  await writeFile(join(dir, 'config.json'), JSON.stringify(spec, null, 2));
  return { dir, spec };
}
