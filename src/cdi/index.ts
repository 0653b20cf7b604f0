/**
 * Container Device Interface: the CDI spec files of this node and the injection of their devices into
 * OCI specs (see registry.ts for the file rules, edits.ts for how edits apply, names.ts for names).
 */
export { CdiRegistry, type CdiView, type CdiDeviceEntry, type CdiInjection, type LoadedSpec, type RejectedSpecFile } from './registry.js';
export { requestedDevices } from './names.js';
export { lacksField, runtimeSupportFrom, type RuntimeField, type RuntimeSupport } from './runtime-support.js';
export type { CdiSpec } from './spec-file.js';
