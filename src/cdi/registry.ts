/**
 * The CDI devices of this node: every `*.json` and `*.yaml` spec file directly in the spec dirs
 * (config `cdi.spec_dirs`), re-read when a file is added, removed or changed (platform/config-dirs.ts:
 * a stat per file per use), so a driver that writes its spec after Stove started is seen by the next
 * CreateContainer without a restart.
 *
 * Priority: a device defined in a later dir replaces the one of an earlier dir. Two files of the same
 * dir defining the same device is a conflict: reported with both files, and the device is unusable
 * until one of them goes. A file that cannot be read or is not a valid spec is logged and skipped; the
 * other files' devices stay usable.
 */
import { extname } from 'node:path';
import { failedPrecondition, invalidArgument, messageOf } from '../common/errors.js';
import { loadPart } from '../common/lazy.js';
import type { Logger } from '../common/logger.js';
import { ConfigDirs, readSmallFile } from '../platform/config-dirs.js';
import type { Spec } from '../oci/index.js';
import { applyEdits, mergeEdits, resolveEdits, type HostNode } from './edits.js';
import { qualifiedName } from './names.js';
import { unsupportedEdit, type RuntimeSupport } from './runtime-support.js';
// The parser (and its YAML library) is imported with the first spec file: most nodes have none.
import type { CdiDevice, CdiSpec, ContainerEdits } from './spec-file.js';

/** A valid spec file, with where it was found. */
export interface LoadedSpec extends CdiSpec {
  path: string;
  /** The index of its dir in the spec dirs: higher wins. */
  priority: number;
}

export interface RejectedSpecFile {
  path: string;
  reason: string;
}

/** One usable device. */
export interface CdiDeviceEntry {
  qualifiedName: string;
  device: CdiDevice;
  spec: LoadedSpec;
}

/** What the spec dirs hold at one moment. */
export interface CdiView {
  devices: ReadonlyMap<string, CdiDeviceEntry>;
  specs: readonly LoadedSpec[];
  rejected: readonly RejectedSpecFile[];
  /** Devices defined by two files of one dir, which are therefore not usable. */
  conflicts: readonly { device: string; files: string[] }[];
}

/** What an injection applied. */
export interface CdiInjection {
  /** The qualified names, in the order applied. */
  devices: string[];
  /** Edits that replaced an earlier one (env variable, device path, mount destination). */
  conflicts: string[];
}

export interface CdiRegistryOptions {
  /** In increasing priority. */
  specDirs: readonly string[];
  log: Logger;
  /** Host device lookup (tests pass a fake). */
  hostNode?: (path: string) => Promise<HostNode | Error>;
}

type Loaded = CdiSpec | { reason: string };

export class CdiRegistry {
  private readonly files: ConfigDirs<Loaded>;
  private view: CdiView = { devices: new Map(), specs: [], rejected: [], conflicts: [] };

  constructor(private readonly options: CdiRegistryOptions) {
    this.files = new ConfigDirs<Loaded>({
      dirs: options.specDirs,
      accept: (name) => extname(name) === '.json' || extname(name) === '.yaml',
      load: (path) => this.load(path),
      log: options.log,
    });
  }

  /** The devices as the spec dirs hold them now. */
  async current(): Promise<CdiView> {
    const { files, changed } = await this.files.scan();
    if (changed) {
      this.view = buildView(
        files.map((f) => ('reason' in f.loaded ? { path: f.path, reason: f.loaded.reason } : { ...f.loaded, path: f.path, priority: f.priority })),
        this.options.log,
      );
    }
    return this.view;
  }

  /**
   * Applies the edits of `devices` (qualified names) and of their specs to `spec`: each spec's own
   * edits once, before its first device's. Any unknown device is InvalidArgument naming every one; a
   * device node missing on the host, or an edit the container's runtime cannot do (`support`,
   * runtime-support.ts; absent: not known, so no edit that needs a newer runtime is applied), is
   * FailedPrecondition naming the device and the field. `spec` is untouched on failure.
   */
  async inject(spec: Spec, devices: readonly string[], support?: RuntimeSupport): Promise<CdiInjection> {
    if (!devices.length) return { devices: [], conflicts: [] };
    const view = await this.current();
    const unresolved = devices.filter((d) => !view.devices.has(d));
    if (unresolved.length) throw invalidArgument(`unresolvable CDI devices ${unresolved.join(', ')}`);
    const edits: ContainerEdits[] = [];
    const specsSeen = new Set<LoadedSpec>();
    for (const name of devices) {
      const entry = view.devices.get(name)!;
      if (!specsSeen.has(entry.spec)) {
        specsSeen.add(entry.spec);
        edits.push(entry.spec.edits);
      }
      edits.push(entry.device.edits);
      const unsupported = unsupportedEdit(name, mergeEdits([entry.spec.edits, entry.device.edits]), support);
      if (unsupported) throw failedPrecondition(unsupported);
    }
    let resolved;
    try {
      resolved = await resolveEdits(mergeEdits(edits), this.options.hostNode);
    } catch (err) {
      throw failedPrecondition(`failed to inject CDI devices ${devices.join(', ')}: ${messageOf(err)}`);
    }
    const conflicts = applyEdits(spec, resolved);
    return { devices: [...devices], conflicts };
  }

  private async load(path: string): Promise<Loaded> {
    try {
      const { MAX_SPEC_BYTES, parseSpecText } = await loadPart('CDI spec parser', () => import('./spec-file.js'));
      const spec = parseSpecText(await readSmallFile(path, MAX_SPEC_BYTES));
      this.options.log.info('CDI spec file loaded', { path, kind: spec.kind, cdiVersion: spec.version, devices: spec.devices.map((d) => d.name) });
      return spec;
    } catch (err) {
      this.options.log.warn('CDI spec file skipped', { path, reason: messageOf(err) });
      return { reason: messageOf(err) };
    }
  }
}

/** Devices by qualified name, by the priority and conflict rules above. */
export function buildView(results: readonly (LoadedSpec | RejectedSpecFile)[], log?: Logger): CdiView {
  const specs = results.filter((r): r is LoadedSpec => !('reason' in r));
  const rejected = results.filter((r): r is RejectedSpecFile => 'reason' in r);
  const devices = new Map<string, CdiDeviceEntry>();
  const clashes = new Map<string, Set<string>>();
  for (const spec of [...specs].sort((a, b) => a.priority - b.priority)) {
    for (const device of spec.devices) {
      const name = qualifiedName(spec.vendor, spec.class, device.name);
      const other = devices.get(name);
      if (other && other.spec.priority === spec.priority) {
        const paths = clashes.get(name) ?? new Set([other.spec.path]);
        clashes.set(name, paths.add(spec.path));
        continue;
      }
      clashes.delete(name); // a later dir settles a clash of an earlier one
      devices.set(name, { qualifiedName: name, device, spec });
    }
  }
  const conflicts = [...clashes].map(([device, paths]) => ({ device, files: [...paths] }));
  for (const c of conflicts) {
    devices.delete(c.device);
    log?.warn('CDI device defined twice in one spec dir: not usable', c);
  }
  return { devices, specs, rejected, conflicts };
}
