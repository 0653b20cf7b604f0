/**
 * The cgroup driver the tests' daemons use: `cgroupfs` unless STOVE_TEST_CGROUP_DRIVER says `systemd`
 * (test/vm/run.sh sets it in the guest). With systemd, a world's cgroup parent is a slice the test
 * makes as a kubelet does (a transient unit, through systemd's D-Bus API), its pods' and containers'
 * cgroups are `stove-<id>.scope` units, and what a test leaves is also looked for among systemd's units.
 */
import { execa } from 'execa';
import { existsSync } from 'node:fs';
import { createCgroup, detectCgroups, dirIn, cgroupPathOf, expandSlice, removeCgroup } from '../../src/platform/cgroups.js';
import { waitFor } from './wait.js';

export type TestCgroupDriver = 'cgroupfs' | 'systemd';

export function testCgroupDriver(): TestCgroupDriver {
  const d = process.env.STOVE_TEST_CGROUP_DRIVER ?? 'cgroupfs';
  if (d !== 'cgroupfs' && d !== 'systemd') throw new Error(`STOVE_TEST_CGROUP_DRIVER must be cgroupfs or systemd, not ${JSON.stringify(d)}`);
  return d;
}

/** Why the systemd driver cannot be tested here (no systemd as PID 1), or undefined. */
export function systemdSkipReason(): string | undefined {
  return existsSync('/run/systemd/system') ? undefined : 'systemd is not PID 1 here (test/vm/run.sh --driver systemd boots a guest where it is)';
}

/**
 * A cgroup parent as the kubelet names it for `driver`: `root` is the top (`/kubepods` or
 * `kubepods.slice`), `levels` the ones below (`burstable`, `pod<uid>`).
 */
export function kubeletParent(driver: TestCgroupDriver, root: string, ...levels: string[]): string {
  if (driver === 'cgroupfs') return [root, ...levels].join('/');
  const base = root.slice(0, -'.slice'.length);
  // The kubelet's systemd names escape '-' in a level (a pod uid) as '_'.
  return `${[base, ...levels.map((l) => l.replace(/-/g, '_'))].join('-')}.slice`;
}

/** The cgroup path of a cgroup parent of either driver. */
export function parentPath(parent: string): string {
  return parent.endsWith('.slice') ? expandSlice(parent) : cgroupPathOf(parent);
}

/** The name of the cgroup directory of a pod's pause container or of a container. */
export function cgroupNameOf(driver: TestCgroupDriver, id: string): string {
  return driver === 'systemd' ? `stove-${id}.scope` : id;
}

/** Makes a cgroup parent, as the kubelet does before it runs pods there. */
export async function makeParent(parent: string): Promise<void> {
  const layout = await detectCgroups();
  if (!parent.endsWith('.slice')) return createCgroup(layout, parent);
  await execa('busctl', [
    'call', 'org.freedesktop.systemd1', '/org/freedesktop/systemd1', 'org.freedesktop.systemd1.Manager',
    'StartTransientUnit', 'ssa(sv)a(sa(sv))', parent, 'fail', '1', 'Description', 's', 'Stove tests', '0',
  ]);
  const dir = dirIn(layout.hierarchies.find((h) => h.version === 2)!, expandSlice(parent));
  await waitFor(`slice ${parent} to have its cgroup`, async () => existsSync(dir) || undefined, 10_000);
}

/** Removes a cgroup parent and whatever is still below it (a slice: stopping it stops its units). */
export async function removeParent(parent: string): Promise<void> {
  if (parent.endsWith('.slice')) await execa('systemctl', ['stop', parent], { reject: false });
  await removeCgroup(await detectCgroups(), parentPath(parent));
}

/** systemd units whose name contains one of `parts`, in any state systemd still lists. */
export async function unitsMatching(...parts: string[]): Promise<string[]> {
  if (systemdSkipReason()) return [];
  const r = await execa('systemctl', ['list-units', '--all', '--plain', '--no-legend', '--no-pager'], { reject: false });
  return r.stdout
    .split('\n')
    .map((l) => l.trim().split(/\s+/)[0] ?? '')
    .filter((unit) => unit && parts.some((p) => unit.includes(p)));
}
