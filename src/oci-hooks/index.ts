/** OCI hooks configured on the node (`oci-hooks(5)` 1.0.0 files in `runtime.hooks_dirs`). */
export { OciHookRegistry, type HooksView, type HookFileEntry } from './registry.js';
export type { OciHookFile, HookContext } from './hook-file.js';
