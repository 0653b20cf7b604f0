/**
 * Mounting and unmounting through util-linux `mount`/`umount` (Node has no mount(2) binding). Every
 * caller that mounts something goes through here, so failures read the same everywhere.
 */
import { readFile } from 'node:fs/promises';
import { execa } from 'execa';
import { internal } from '../common/errors.js';

export interface MountRequest {
  type: string;
  source: string;
  target: string;
  /** `-o` options, e.g. ['bind', 'ro'] or overlay's lowerdir=…. */
  options?: string[];
  /** Run `mount` in this directory (overlay lowerdir strings relative to it stay short). */
  cwd?: string;
}

/** Mounts; throws an Internal error quoting mount's own message. */
export async function mount(req: MountRequest): Promise<void> {
  const args = ['-t', req.type];
  if (req.options?.length) args.push('-o', req.options.join(','));
  args.push(req.source, req.target);
  const r = await execa('mount', args, { reject: false, cwd: req.cwd });
  if (r.exitCode !== 0) throw internal(`mount ${req.type} on ${req.target} failed: ${(r.stderr || r.stdout).trim()}`);
}

/** Bind-mounts `source` on `target` (optionally read-only, which needs a remount on older kernels). */
export async function bindMount(source: string, target: string, readOnly = false): Promise<void> {
  await mount({ type: 'none', source, target, options: ['bind'] });
  if (readOnly) await mount({ type: 'none', source: 'none', target, options: ['remount', 'bind', 'ro'] });
}

/** Unmounts `target`. Not mounted is not an error; `lazy` detaches a busy mount (MNT_DETACH). */
export async function unmount(target: string, lazy = false): Promise<void> {
  if (!(await isMountPoint(target))) return;
  const r = await execa('umount', lazy ? ['-l', target] : [target], { reject: false });
  if (r.exitCode !== 0 && (await isMountPoint(target))) throw internal(`umount ${target} failed: ${(r.stderr || r.stdout).trim()}`);
}

/** Mount points of this mount namespace, from /proc/self/mountinfo (octal escapes decoded). */
export async function mountPoints(): Promise<Set<string>> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  const points = new Set<string>();
  for (const line of text.split('\n')) {
    const field = line.split(' ')[4];
    if (field) points.add(field.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8))));
  }
  return points;
}

/** True when `path` is a mount point. */
export async function isMountPoint(path: string): Promise<boolean> {
  return (await mountPoints()).has(path);
}
