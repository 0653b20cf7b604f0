/** RuntimeConfig: the cgroup driver, which the kubelet adopts instead of its own flag. */
import { CgroupDriver, RuntimeConfigResponse } from '../gen/runtime/v1/api.js';
import type { RuntimeInfo } from './runtime-info.js';

export async function runtimeConfig(info: RuntimeInfo): Promise<RuntimeConfigResponse> {
  const driver = info.deps.config.runtime.cgroupDriver === 'systemd' ? CgroupDriver.SYSTEMD : CgroupDriver.CGROUPFS;
  return RuntimeConfigResponse.fromPartial({ linux: { cgroupDriver: driver } });
}
