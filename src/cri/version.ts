/** Version: the runtime's name and version, and the CRI version it speaks. */
import { VersionResponse, type VersionRequest } from '../gen/runtime/v1/api.js';
import { responsePerKey } from '../api/wire-reuse.js';
import { RUNTIME_API_VERSION, RUNTIME_NAME, type RuntimeInfo } from './runtime-info.js';

/** The answer never changes for a daemon's runtime info: built and encoded once. */
const versionOf = responsePerKey((info: RuntimeInfo) =>
  VersionResponse.fromPartial({
    version: '0.1.0',
    runtimeName: RUNTIME_NAME,
    runtimeVersion: info.deps.version,
    runtimeApiVersion: RUNTIME_API_VERSION,
  }),
);

export async function version(info: RuntimeInfo, _req: VersionRequest): Promise<VersionResponse> {
  return versionOf(info);
}
