/**
 * Spec options in the style of containerd's `oci.SpecOpts`: each is a small named step that changes a
 * Spec in place and may throw a StoveError. A builder is a list of steps applied in order, so each rule
 * reads (and is tested) on its own.
 */
import type { Linux, LinuxResources, Process, Spec } from './types.js';
import { OCI_VERSION } from './defaults.js';

/** One step of a spec builder. */
export type SpecOpt = (spec: Spec) => void;

/** Applies the steps in order to `spec` and returns it. */
export function applyOpts(spec: Spec, opts: readonly SpecOpt[]): Spec {
  for (const opt of opts) opt(spec);
  return spec;
}

/** The empty starting point: process as root in `/`, no mounts, no namespaces. */
export function emptySpec(): Spec {
  return {
    ociVersion: OCI_VERSION,
    process: { user: { uid: 0, gid: 0 }, args: [], cwd: '/' },
    root: { path: 'rootfs' },
    mounts: [],
    linux: { namespaces: [], resources: { devices: [{ allow: false, access: 'rwm' }] } },
  };
}

/** spec.process, created if missing. */
export function processOf(spec: Spec): Process {
  spec.process ??= { user: { uid: 0, gid: 0 }, args: [], cwd: '/' };
  return spec.process;
}

/** spec.linux, created if missing. */
export function linuxOf(spec: Spec): Linux {
  spec.linux ??= {};
  return spec.linux;
}

/** spec.linux.resources, created if missing. */
export function resourcesOf(spec: Spec): LinuxResources {
  const linux = linuxOf(spec);
  linux.resources ??= {};
  return linux.resources;
}
