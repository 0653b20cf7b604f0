/**
 * Container Device Interface: the CDI spec files of this node and the injection of their devices into
 * OCI specs (see registry.ts for the file rules, edits.ts for how edits apply, names.ts for names).
 */
export { CdiRegistry, buildView, type CdiView, type CdiDeviceEntry, type CdiInjection, type LoadedSpec, type RejectedSpecFile } from './registry.js';
export { requestedDevices, parseQualifiedName, CDI_ANNOTATION_PREFIX } from './names.js';
export { parseSpecText, CDI_VERSIONS, type CdiSpec } from './spec-file.js';
