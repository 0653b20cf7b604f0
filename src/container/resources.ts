/**
 * UpdateContainerResources semantics (containerd `updateOCIResource`): the new request is laid over the
 * current resources field by field; a field left at its zero value keeps the current setting.
 */
import { LinuxContainerResources } from '../gen/runtime/v1/api.js';

function isSet(value: unknown): boolean {
  if (value === undefined || value === null) return false;
  if (typeof value === 'bigint') return value !== 0n;
  if (typeof value === 'number') return value !== 0;
  if (typeof value === 'string') return value !== '';
  if (typeof value === 'boolean') return value;
  if (Array.isArray(value)) return value.length > 0;
  if (typeof value === 'object') return Object.keys(value).length > 0;
  return true;
}

/** `requested` over `current`: set fields replace, zero fields keep; `unified` entries merge. */
export function mergeResources(current: LinuxContainerResources | undefined, requested: LinuxContainerResources | undefined): LinuxContainerResources {
  const out = LinuxContainerResources.fromPartial(current ?? {});
  if (!requested) return out;
  for (const [key, value] of Object.entries(requested) as [keyof LinuxContainerResources, unknown][]) {
    if (!isSet(value)) continue;
    if (key === 'unified') out.unified = { ...out.unified, ...(value as Record<string, string>) };
    else (out as unknown as Record<string, unknown>)[key] = value;
  }
  return out;
}
