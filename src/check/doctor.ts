/**
 * `stove check`: a node doctor. Each check prints one line, and a failing one says what to do.
 * Required checks make the command exit non-zero; advisory ones only warn.
 */
import { access, constants, readFile, statfs } from 'node:fs/promises';
import { release } from 'node:os';
import { join } from 'node:path';
import type { Config } from '../config/schema.js';
import { pathsFor } from '../config/paths.js';
import { readQuarantine } from '../persist/quarantine.js';
import { findCniNetwork } from '../network/cni-config.js';
import { CdiRegistry } from '../cdi/index.js';
import { OciHookRegistry } from '../oci-hooks/index.js';
import { silentLogger } from '../common/logger.js';
import { trustInventory } from '../images/trust/inventory.js';
import { checkpointDirs, nriStatusFile } from '../config/paths.js';
import { probeCriu } from '../checkpoint/criu.js';
import { readJsonFile } from '../persist/atomic-file.js';
import { discoverPlugins, type DiscoveredPlugin, type PluginInfo } from '../nri/adaptation.js';
import { runCommand } from '../platform/processes.js';
import { appArmorEnabled, appArmorProfileMode } from '../platform/proc.js';
import { findAppArmorParser, STOVE_APPARMOR_PROFILE } from '../oci/index.js';

export type CheckStatus = 'ok' | 'warn' | 'fail';

export interface CheckResult {
  name: string;
  status: CheckStatus;
  detail: string;
  /** What to do about a warn or fail. */
  fix?: string;
  /** Further lines (a listing), printed indented below. */
  lines?: string[];
}

async function executable(path: string): Promise<boolean> {
  try {
    await access(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The first line `path args` prints, or '' when it fails. */
async function versionOf(path: string, args: string[]): Promise<string> {
  const r = await runCommand(path, { args, timeoutMs: 5000, maxOutputBytes: 64 * 1024 });
  return r.exitCode === 0 ? (r.stdout.split('\n')[0] ?? '') : '';
}

async function checkRoot(): Promise<CheckResult> {
  const uid = process.getuid?.() ?? -1;
  return uid === 0
    ? { name: 'root', status: 'ok', detail: 'running as root' }
    : { name: 'root', status: 'fail', detail: `running as uid ${uid}`, fix: 'run stove as root (it mounts, creates namespaces and cgroups)' };
}

async function checkBinary(name: string, path: string, pkg: string): Promise<CheckResult> {
  if (!(await executable(path))) return { name, status: 'fail', detail: `${path} not found`, fix: `apt-get install ${pkg}, or set its path in the config` };
  return { name, status: 'ok', detail: `${path}: ${await versionOf(path, ['--version'])}` };
}

/**
 * crun chowns a container process's standard streams to its user (since crun 1.3), and conmon gives a
 * container without stdin the node's own `/dev/null`: crun before 1.24 leaves the node's `/dev/null`
 * owned by the container's user. crun 1.24 (2025-09) is the first release that skips devices
 * (containers/crun#1847, "linux: never chown devices" in its NEWS). docs/cri.md, OCI runtimes.
 */
const CRUN_CHOWNS_STREAMS_SINCE = [1, 3] as const;
const CRUN_SKIPS_DEVICES_SINCE = [1, 24] as const;

/**
 * crun's version from `crun --version` (`crun version 1.8.1` on its first line; a suffix such as `-dirty`
 * after the numbers is ignored); undefined for another runtime.
 */
export function crunVersion(versionOutput: string): [number, number, number] | undefined {
  const m = /^crun version (\d{1,6})\.(\d{1,6})(?:\.(\d{1,6}))?/.exec(versionOutput);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)] : undefined;
}

function olderThan(v: readonly number[], than: readonly number[]): boolean {
  for (let i = 0; i < than.length; i++) if ((v[i] ?? 0) !== than[i]) return (v[i] ?? 0) < than[i]!;
  return false;
}

/**
 * `stove check`'s line for an OCI runtime (runtime.runc, or a runtime handler's path) from what its
 * `--version` printed: ok with the first line, a warning for a crun that chowns the node's `/dev/null`.
 */
export function ociRuntimeCheck(name: string, path: string, versionOutput: string): CheckResult {
  const first = versionOutput.split('\n')[0] ?? '';
  const detail = `${path}: ${first}`;
  const crun = crunVersion(versionOutput);
  if (crun && !olderThan(crun, CRUN_CHOWNS_STREAMS_SINCE) && olderThan(crun, CRUN_SKIPS_DEVICES_SINCE)) {
    return {
      name,
      status: 'warn',
      detail: `${detail}: crun before ${CRUN_SKIPS_DEVICES_SINCE.join('.')} chowns the node's /dev/null to the user of a container or exec that runs without stdin (containers/crun#1847)`,
      fix: `use runc, or crun ${CRUN_SKIPS_DEVICES_SINCE.join('.')} or later (docs/cri.md, OCI runtimes)`,
    };
  }
  return { name, status: 'ok', detail };
}

/** runtime.runc (required) and each runtime handler's binary (a pod asking for a missing one fails). */
export async function checkOciRuntimes(config: Config): Promise<CheckResult[]> {
  const runtimes = [
    { name: 'runc', path: config.runtime.runc, missing: 'fail' as const, fix: 'apt-get install runc, or set runtime.runc' },
    ...Object.entries(config.runtime.handlers).map(([handler, h]) => ({
      name: `handler ${handler}`,
      path: h.path,
      missing: 'warn' as const,
      fix: `install it, or fix runtime.handlers.${handler}.path: pods with runtime_handler "${handler}" fail until then`,
    })),
  ];
  return Promise.all(
    runtimes.map(async ({ name, path, missing, fix }): Promise<CheckResult> => {
      if (!(await executable(path))) return { name, status: missing, detail: `${path} not found`, fix };
      const r = await runCommand(path, { args: ['--version'], timeoutMs: 5000, maxOutputBytes: 64 * 1024 });
      return ociRuntimeCheck(name, path, r.exitCode === 0 ? r.stdout : '');
    }),
  );
}

async function checkCniPlugins(config: Config): Promise<CheckResult> {
  const wanted = ['bridge', 'host-local', 'loopback', 'portmap'];
  const missing: string[] = [];
  for (const plugin of wanted) {
    let found = false;
    for (const dir of config.network.cniBinDirs) if (await executable(join(dir, plugin))) found = true;
    if (!found) missing.push(plugin);
  }
  return missing.length === 0
    ? { name: 'cni plugins', status: 'ok', detail: `${wanted.join(', ')} in ${config.network.cniBinDirs.join(':')}` }
    : { name: 'cni plugins', status: 'fail', detail: `missing ${missing.join(', ')} in ${config.network.cniBinDirs.join(':')}`, fix: 'apt-get install containernetworking-plugins' };
}

async function checkCniConfig(config: Config): Promise<CheckResult> {
  const lookup = await findCniNetwork(config.network.cniConfDir);
  return lookup.network
    ? { name: 'cni config', status: 'ok', detail: `network "${lookup.network.name}" from ${lookup.network.source}` }
    : { name: 'cni config', status: 'warn', detail: lookup.reason, fix: `put a .conflist in ${config.network.cniConfDir} (make run installs a default one); pods cannot start until then` };
}

/** Where checkOverlay looks: the kernel's filesystems and its module directory (`uname -r`). */
export interface OverlaySources {
  filesystems: string;
  modulesDir: string;
}

const OVERLAY_SOURCES: OverlaySources = { filesystems: '/proc/filesystems', modulesDir: `/lib/modules/${release()}` };

/** A module path as modules.dep and modules.builtin name it: kernel/fs/overlayfs/overlay.ko[.xz|.zst|.gz]. */
const OVERLAY_MODULE = /^(kernel\/fs\/overlayfs\/overlay\.ko(?:\.[a-z]+)?)(?::|$)/m;

/**
 * overlayfs: registered with the kernel (ok), a module the kernel loads on the first overlay mount (warn:
 * a fresh node has not mounted one yet, which is healthy), or neither (fail: images cannot be mounted).
 */
export async function checkOverlay(sources: OverlaySources): Promise<CheckResult> {
  const name = 'overlayfs';
  const fs = await readFile(sources.filesystems, 'utf8').catch(() => '');
  if (/\boverlay\b/.test(fs)) return { name, status: 'ok', detail: 'overlay filesystem available' };
  const builtin = await readFile(join(sources.modulesDir, 'modules.builtin'), 'utf8').catch(() => '');
  if (OVERLAY_MODULE.test(builtin)) return { name, status: 'ok', detail: `overlay built into the kernel (${sources.modulesDir}/modules.builtin)` };
  const dep = await readFile(join(sources.modulesDir, 'modules.dep'), 'utf8').catch(() => '');
  const module = OVERLAY_MODULE.exec(dep)?.[1];
  if (module && (await access(join(sources.modulesDir, module)).then(() => true, () => false))) {
    return {
      name,
      status: 'warn',
      detail: `overlay module not loaded yet: ${join(sources.modulesDir, module)} (the kernel loads it on the first overlay mount)`,
      fix: 'nothing is needed; modprobe overlay loads it now',
    };
  }
  return {
    name,
    status: 'fail',
    detail: `overlay not in ${sources.filesystems} and no overlay module in ${sources.modulesDir}`,
    fix: 'use a kernel with CONFIG_OVERLAY_FS (built in or as a module), or install its modules package',
  };
}

/** The v2 controllers Stove's limits and stats use; a node without one of them cannot honour a CRI field. */
const V2_REQUIRED = ['cpu', 'cpuset', 'memory', 'pids', 'io'];

async function checkCgroups(): Promise<CheckResult> {
  const v2 = await readFile('/sys/fs/cgroup/cgroup.controllers', 'utf8').catch(() => undefined);
  if (v2 !== undefined) {
    const controllers = v2.trim().split(/\s+/);
    const missing = V2_REQUIRED.filter((c) => !controllers.includes(c));
    // PSI feeds the CRI stats' pressure fields; the kernel may be built with it off (psi=1 turns it on).
    const psi = (await readFile('/proc/pressure/cpu', 'utf8').catch(() => undefined)) !== undefined;
    const detail = `v2 (unified), controllers: ${controllers.join(' ')}; PSI ${psi ? 'on' : 'off'}`;
    if (missing.length) return { name: 'cgroups', status: 'fail', detail: `${detail}; missing: ${missing.join(', ')}`, fix: 'enable them in the kernel (and, under systemd, do not disable them with DefaultXAccounting=no)' };
    return psi ? { name: 'cgroups', status: 'ok', detail } : { name: 'cgroups', status: 'warn', detail, fix: 'boot with psi=1 for pressure stats' };
  }
  const text = await readFile('/proc/cgroups', 'utf8').catch(() => '');
  const enabled = text
    .split('\n')
    .filter((l) => l && !l.startsWith('#'))
    .map((l) => l.split('\t'))
    .filter((f) => f[3] === '1')
    .map((f) => f[0]!);
  const required = ['cpu', 'cpuacct', 'memory', 'pids', 'devices', 'freezer'];
  const missing = required.filter((c) => !enabled.includes(c));
  return missing.length === 0
    ? { name: 'cgroups', status: 'ok', detail: `v1, controllers: ${enabled.join(',')}` }
    : { name: 'cgroups', status: 'fail', detail: `v1, missing controllers: ${missing.join(', ')}`, fix: 'enable them on the kernel command line (cgroup_enable=…)' };
}

/**
 * The cgroup driver against the node: `systemd` needs systemd as PID 1 and its D-Bus (runc asks it for a
 * scope per container) and slices as parents; `cgroupfs` on a systemd node works but is not what the
 * kubelet expects there, and both must use the same driver.
 */
async function checkCgroupDriver(config: Config): Promise<CheckResult> {
  const { cgroupDriver, cgroupParent } = config.runtime;
  const systemdRuns = await access('/run/systemd/system').then(() => true, () => false);
  const name = 'cgroup driver';
  if (cgroupDriver === 'systemd') {
    if (!systemdRuns) return { name, status: 'fail', detail: 'systemd, but systemd is not PID 1 here', fix: 'set runtime.cgroup_driver = "cgroupfs" (and --cgroup-driver=cgroupfs for the kubelet)' };
    if (!(await access('/run/dbus/system_bus_socket').then(() => true, () => false))) {
      return { name, status: 'fail', detail: 'systemd, but the D-Bus system bus is not running', fix: 'install and start dbus (runc reaches systemd through it)' };
    }
    if (!cgroupParent.endsWith('.slice')) return { name, status: 'fail', detail: `systemd, but runtime.cgroup_parent "${cgroupParent}" is not a slice`, fix: 'set runtime.cgroup_parent = "kubepods.slice"' };
    return { name, status: 'ok', detail: `systemd (pods default to ${cgroupParent}; the kubelet needs cgroupDriver: systemd)` };
  }
  if (cgroupParent.endsWith('.slice')) return { name, status: 'fail', detail: `cgroupfs, but runtime.cgroup_parent "${cgroupParent}" is a systemd slice`, fix: 'set runtime.cgroup_parent to a path such as "/kubepods"' };
  return systemdRuns
    ? { name, status: 'warn', detail: 'cgroupfs on a node that systemd manages', fix: 'set runtime.cgroup_driver = "systemd" and cgroupDriver: systemd in the kubelet, as Kubernetes recommends on systemd nodes' }
    : { name, status: 'ok', detail: `cgroupfs (pods default to ${cgroupParent}; the kubelet needs cgroupDriver: cgroupfs)` };
}

async function checkIptables(): Promise<CheckResult> {
  const v = await versionOf('iptables', ['--version']);
  return v
    ? { name: 'iptables', status: 'ok', detail: v }
    : { name: 'iptables', status: 'fail', detail: 'iptables not found', fix: 'apt-get install iptables (the portmap and bridge plugins need it)' };
}

async function checkFreeSpace(config: Config): Promise<CheckResult> {
  try {
    const st = await statfs(config.root).catch(() => statfs('/'));
    const freeGiB = (st.bavail * st.bsize) / 2 ** 30;
    if (freeGiB < 2)
      return { name: 'disk', status: 'warn', detail: `${freeGiB.toFixed(1)} GiB free under ${config.root}`, fix: 'free space: images and container layers live there' };
    return { name: 'disk', status: 'ok', detail: `${freeGiB.toFixed(1)} GiB free under ${config.root}` };
  } catch (err) {
    return { name: 'disk', status: 'warn', detail: `cannot stat ${config.root}: ${(err as Error).message}` };
  }
}

/** The CDI devices in the spec dirs, and the spec files that cannot be used, with why. */
export async function checkCdi(config: Config): Promise<CheckResult> {
  const view = await new CdiRegistry({ specDirs: config.cdi.specDirs, log: silentLogger }).current();
  const dirs = config.cdi.specDirs.join(':');
  const lines = [
    ...[...view.devices.values()].map((d) => `device   ${d.qualifiedName}  (${d.spec.path}, cdiVersion ${d.spec.version})`),
    ...view.rejected.map((r) => `rejected ${r.path}: ${r.reason}`),
    ...view.conflicts.map((c) => `conflict ${c.device}: defined in ${c.files.join(' and ')}; not usable`),
  ];
  const problems = view.rejected.length + view.conflicts.length;
  return {
    name: 'cdi',
    status: problems ? 'warn' : 'ok',
    detail: `${view.devices.size} device(s) from ${view.specs.length} spec file(s) in ${dirs}${problems ? `, ${problems} problem(s)` : ''}`,
    ...(problems ? { fix: 'fix or remove the rejected spec files (containers asking for their devices fail to create)' } : {}),
    lines,
  };
}

/** The OCI hook files in effect, and the ones skipped, with why. */
export async function checkOciHooks(config: Config): Promise<CheckResult> {
  const view = await new OciHookRegistry({ hooksDirs: config.runtime.hooksDirs, log: silentLogger }).current();
  const lines = [
    ...view.hooks.map((h) => `hook     ${h.path}  (${h.hook.stages.join(', ')}: ${h.hook.hook.path})`),
    ...view.rejected.map((r) => `rejected ${r.path}: ${r.reason}`),
  ];
  return {
    name: 'oci hooks',
    status: view.rejected.length ? 'warn' : 'ok',
    detail: `${view.hooks.length} hook file(s) in ${config.runtime.hooksDirs.join(':')}${view.rejected.length ? `, ${view.rejected.length} rejected` : ''}`,
    ...(view.rejected.length ? { fix: 'fix or remove the rejected hook files' } : {}),
    lines,
  };
}

/** Certs dirs and signature policies: a file that makes pulls fail is a failure. */
export async function checkRegistryTrust(config: Config): Promise<CheckResult> {
  const view = await trustInventory(config.images);
  return {
    name: 'registry trust',
    status: view.problems.length ? 'fail' : 'ok',
    detail: `${view.hosts} registry host dir(s) in ${config.images.certsDirs.join(':') || 'no certs dir'}, ${view.policies} signature policy file(s)${view.problems.length ? `, ${view.problems.length} problem(s)` : ''}`,
    ...(view.problems.length ? { fix: 'fix the files named below (docs/registry-trust.md)' } : {}),
    lines: [...view.lines, ...view.problems.map((p) => `problem  ${p}`)],
  };
}

/** Records Stove could not read: what they describe is left alone until an operator looks. */
async function checkQuarantine(config: Config): Promise<CheckResult> {
  const dir = pathsFor(config).quarantineDir;
  let entries;
  try {
    entries = await readQuarantine(dir);
  } catch (err) {
    return { name: 'quarantine', status: 'warn', detail: `cannot list ${dir}: ${(err as Error).message}` };
  }
  if (entries.length === 0) return { name: 'quarantine', status: 'ok', detail: 'no unreadable records' };
  return {
    name: 'quarantine',
    status: 'fail',
    detail: `${entries.length} unreadable record(s) in ${dir}; what they describe is left alone`,
    lines: entries.map((e) => `${e.kind} ${e.id}, from ${e.from || 'an unknown place'}: ${e.error || 'unreadable'}`),
    fix: 'repair each record and move it back to where it came from (then restart stove), or clean up what it describes by hand and delete the entry; until then image garbage collection keeps every layer and blob such a record may reference',
  };
}

/**
 * AppArmor: whether the host has it, and whether the profile RuntimeDefault (and no profile) means is
 * loaded. Stove's own is loaded by `stove serve`; it needs apparmor_parser for that.
 */
export async function checkAppArmor(config: Config): Promise<CheckResult> {
  const name = 'apparmor';
  if (!(await appArmorEnabled())) {
    return { name, status: 'ok', detail: 'not enabled on this host: containers run unconfined, and a request for an AppArmor profile other than unconfined is refused' };
  }
  const profile = config.runtime.apparmorDefaultProfile || STOVE_APPARMOR_PROFILE;
  if (profile === 'unconfined') {
    return {
      name,
      status: 'warn',
      detail: 'enabled; runtime.apparmor_default_profile = "unconfined": containers that ask for RuntimeDefault or for no profile run unconfined',
      fix: `set runtime.apparmor_default_profile = "${STOVE_APPARMOR_PROFILE}" (or a profile of your own) to confine them`,
    };
  }
  const [mode, parser] = await Promise.all([appArmorProfileMode(profile), findAppArmorParser()]);
  const uses = 'containers that ask for RuntimeDefault or for no profile run under it, privileged ones unconfined';
  if (mode) return { name, status: 'ok', detail: `enabled; default profile ${profile} loaded (${mode}): ${uses}` };
  if (profile !== STOVE_APPARMOR_PROFILE) {
    return {
      name,
      status: 'fail',
      detail: `enabled; the configured default profile ${profile} is not loaded: ${uses.replace('run under it', 'fail to create')}`,
      fix: `load it with apparmor_parser -r <file>, or set runtime.apparmor_default_profile = "${STOVE_APPARMOR_PROFILE}"`,
    };
  }
  if (!parser) {
    return {
      name,
      status: 'fail',
      detail: `enabled; ${profile} is not loaded and apparmor_parser is not installed to load it: containers that ask for RuntimeDefault or for no profile fail to create`,
      fix: 'apt-get install apparmor (stove serve then loads the profile at its start, or at the next container that needs it)',
    };
  }
  return {
    name,
    status: 'warn',
    detail: `enabled; ${profile} is not loaded yet (stove serve loads it with ${parser} at its start and when a container needs it)`,
    fix: 'start stove serve; if it logs that it cannot load the profile, the parser\'s message says why',
  };
}

/** Runs every check. */
export async function runChecks(config: Config): Promise<CheckResult[]> {
  const results = await Promise.all([
    checkRoot(),
    checkOciRuntimes(config),
    checkBinary('conmon', config.runtime.conmon, 'conmon'),
    checkCniPlugins(config),
    checkCniConfig(config),
    checkOverlay(OVERLAY_SOURCES),
    checkCgroups(),
    checkCgroupDriver(config),
    checkAppArmor(config),
    checkIptables(),
    checkFreeSpace(config),
    checkCdi(config),
    checkOciHooks(config),
    checkRegistryTrust(config),
    checkNri(config),
    checkQuarantine(config),
    checkCheckpoints(config),
  ]);
  return results.flat();
}

/** CheckpointContainer and restores: advisory, a node runs pods without CRIU. */
async function checkCheckpoints(config: Config): Promise<CheckResult> {
  const criu = await probeCriu();
  const dirs = checkpointDirs(config).join(', ');
  if (criu.ok) return { name: 'checkpoints', status: 'ok', detail: `${criu.message}; archives in ${dirs}` };
  return { name: 'checkpoints', status: 'warn', detail: criu.message, fix: 'CheckpointContainer and restores answer FAILED_PRECONDITION until CRIU works (apt-get install criu; a kernel criu check accepts)' };
}

/** NRI: the pre-launched plugins on disk and, while a daemon runs, the plugins connected to it. */
async function checkNri(config: Config): Promise<CheckResult> {
  if (!config.nri.enable) return { name: 'nri', status: 'ok', detail: 'disabled ([nri] enable = false)' };
  let launched: DiscoveredPlugin[];
  try {
    launched = await discoverPlugins(config.nri.pluginPath);
  } catch (err) {
    return { name: 'nri', status: 'warn', detail: `cannot read ${config.nri.pluginPath}: ${(err as Error).message}`, fix: 'fix the permissions of nri.plugin_path' };
  }
  const onDisk = launched.length ? launched.map((p) => `${p.index}-${p.name}`).join(', ') : 'none';
  const status = await readJsonFile<{ socket: string; socketProblem?: string; plugins: PluginInfo[] }>(nriStatusFile(config)).catch(() => undefined);
  const running = status
    ? `connected: ${status.plugins.length ? status.plugins.map((p) => `${p.index}-${p.name} (${p.kind}${p.pid ? `, pid ${p.pid}` : ''})`).join(', ') : 'none'}`
    : 'daemon not running';
  const socket = config.nri.disableConnections ? 'external connections disabled' : `socket ${config.nri.socketPath}`;
  const v = config.nri.defaultValidator;
  const rules = [
    v.rejectOciHookAdjustment && 'OCI hooks',
    v.rejectRuntimeDefaultSeccompAdjustment && 'runtime default seccomp',
    v.rejectUnconfinedSeccompAdjustment && 'unconfined seccomp',
    v.rejectCustomSeccompAdjustment && 'custom seccomp',
    v.rejectNamespaceAdjustment && 'namespaces',
    v.rejectSysctlAdjustment && 'sysctls',
  ].filter(Boolean);
  const validator = v.enable
    ? `default validator rejects ${rules.length ? rules.join(', ') : 'nothing'}${v.requiredPlugins.length ? `, requires ${v.requiredPlugins.join(', ')}` : ''}`
    : 'default validator off';
  const detail = `${socket}; pre-launched in ${config.nri.pluginPath}: ${onDisk}; ${running}; ${validator}`;
  if (status?.socketProblem)
    return { name: 'nri', status: 'warn', detail: `${detail}; external plugins cannot connect: ${status.socketProblem}`, fix: 'give this daemon a socket of its own (nri.socket_path) or set nri.disable_connections = true' };
  return { name: 'nri', status: 'ok', detail };
}

/** One line per check: `ok    runc  /usr/bin/runc: runc version 1.1.5`, plus the fix when there is one. */
export function formatChecks(results: CheckResult[]): string {
  const width = Math.max(...results.map((r) => r.name.length));
  return results
    .map(
      (r) =>
        `${r.status.padEnd(5)} ${r.name.padEnd(width)}  ${r.detail}` +
        (r.lines ?? []).map((l) => `\n      ${' '.repeat(width)}  ${l}`).join('') +
        (r.fix ? `\n      ${' '.repeat(width)}  -> ${r.fix}` : ''),
    )
    .join('\n');
}
