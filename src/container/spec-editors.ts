/**
 * Edits to a container's OCI spec after the spec module built it and before config.json is written:
 * what node-level configuration adds to every container that asks for it (CDI devices, OCI hooks).
 * Each editor changes the spec in place and returns what it applied, which the record keeps and
 * ContainerStatus' verbose info shows under the editor's key. An editor that throws fails the create.
 */
import type { ContainerConfig, PodSandboxConfig } from '../gen/runtime/v1/api.js';
import type { Logger } from '../common/logger.js';
import { requestedDevices, type CdiRegistry, type RuntimeSupport } from '../cdi/index.js';
import type { OciHookRegistry } from '../oci-hooks/index.js';
import type { Spec } from '../oci/index.js';

/** What an editor may look at besides the spec. */
export interface SpecEditRequest {
  id: string;
  config: ContainerConfig;
  podConfig: PodSandboxConfig;
  /** What the container's OCI runtime can do (asked only by an editor that needs it). */
  runtime?: () => Promise<RuntimeSupport>;
}

export interface SpecEditor {
  /** The key of what it applied in the record and the verbose info. */
  readonly key: string;
  /** Edits `spec`; returns what was applied, or undefined when nothing was. */
  edit(spec: Spec, request: SpecEditRequest): Promise<unknown>;
}

/** Runs the editors in order; returns what each applied, by key. */
export async function applySpecEditors(editors: readonly SpecEditor[], spec: Spec, request: SpecEditRequest): Promise<Record<string, unknown>> {
  const applied: Record<string, unknown> = {};
  for (const editor of editors) {
    const result = await editor.edit(spec, request);
    if (result !== undefined) applied[editor.key] = result;
  }
  return applied;
}

/** CDI devices from `CDI_devices` and `cdi.k8s.io/*` annotations (`cdiDevices`: their names). */
export function cdiEditor(cdi: Pick<CdiRegistry, 'inject'>, log: Logger): SpecEditor {
  return {
    key: 'cdiDevices',
    async edit(spec, { id, config, runtime }) {
      const devices = requestedDevices(
        config.CDIDevices.map((d) => d.name),
        config.annotations,
      );
      if (!devices.length) return undefined;
      const injected = await cdi.inject(spec, devices, runtime ? await runtime() : undefined);
      for (const conflict of injected.conflicts) log.warn('CDI edit replaced an earlier one', { container: id, conflict });
      log.info('CDI devices injected', { container: id, devices: injected.devices });
      return injected.devices;
    },
  };
}

/**
 * OCI hooks whose `when` matches (`ociHooks`: the hook files applied). Annotations are matched as
 * CRI-O matches them: the container's own (whether or not runtime.allowed_annotations lets them into
 * the spec; a hook file keyed on an annotation is the node's choice), with the spec's fixed keys.
 */
export function ociHooksEditor(hooks: Pick<OciHookRegistry, 'inject'>): SpecEditor {
  return {
    key: 'ociHooks',
    async edit(spec, { config }) {
      const annotations = { ...config.annotations, ...spec.annotations };
      const applied = await hooks.inject(spec, { annotations, hasBindMounts: config.mounts.length > 0 });
      return applied.length ? applied : undefined;
    },
  };
}
