/**
 * The container monitor: one object bound to conmon's binary and directories that the sandbox,
 * container and streaming modules use. Each call names the OCI runtime (a `Runc`) it goes through, so
 * runtime handlers (runc, crun) share one monitor.
 */
import { join } from 'node:path';
import type { Runc } from '../runtime/runc.js';
import { attachContainer, DEFAULT_RELAY_PATH, type AttachSession, type SessionIo } from './attach.js';
import {
  createContainer,
  removeContainerFiles,
  type ConmonConfig,
  type CreateContainerOptions,
  type CreatedContainer,
} from './conmon.js';
import { reopenLog } from './ctl.js';
import { execStreaming, type ExecSession, type ExecStreamOptions } from './exec-stream.js';
import type { OciProcess } from './exec-dir.js';
import { readExit, waitForExit, type ExitRecord } from './exits.js';
import { isSameProcessAlive } from './process.js';

export interface MonitorConfig extends ConmonConfig {
  /** The attach relay binary (default: dist/libexec/stove-attach-relay from `make build`). */
  relayPath?: string;
}

/** conmon-based process supervision for containers and execs. */
export class Monitor {
  private readonly relayPath: string;

  constructor(readonly config: MonitorConfig) {
    this.relayPath = config.relayPath ?? DEFAULT_RELAY_PATH;
  }

  /** Creates the container under a new conmon (runc state `created`); the caller then runs `runtime.start(id)`. */
  createContainer(runtime: Runc, opts: CreateContainerOptions): Promise<CreatedContainer> {
    return createContainer(this.config, runtime, opts);
  }

  /** Removes the attach link and the exit file once the container is deleted from the runtime. */
  removeContainerFiles(id: string): Promise<void> {
    return removeContainerFiles(this.config, id);
  }

  /** The recorded exit of a container, if conmon wrote one. */
  readExit(id: string): Promise<ExitRecord | undefined> {
    return readExit(this.config.exitsDir, id);
  }

  /** Waits (up to `timeoutMs`) for the exit file of a container that runc reports stopped. */
  waitForExit(id: string, timeoutMs?: number): Promise<ExitRecord | undefined> {
    return waitForExit(this.config.exitsDir, id, timeoutMs);
  }

  /** True while the conmon recorded at create time still runs. */
  isMonitorAlive(created: Pick<CreatedContainer, 'conmonPid' | 'conmonStartTime'>): Promise<boolean> {
    return isSameProcessAlive(created.conmonPid, created.conmonStartTime);
  }

  /** Starts an interactive process in the container (CRI Exec through the streaming server). */
  exec(runtime: Runc, id: string, proc: OciProcess, opts: ExecStreamOptions): Promise<ExecSession> {
    return execStreaming(this.config, this.relayPath, runtime, id, proc, opts);
  }

  /** Attaches to the container's stdio (CRI Attach). */
  attach(id: string, io: SessionIo): Promise<AttachSession> {
    return attachContainer(this.config.attachDir, this.relayPath, id, io, this.config.log);
  }

  /** Makes conmon reopen the container's log (after the caller renamed it); returns once the new file exists. */
  reopenLog(id: string, logPath: string, timeoutMs?: number): Promise<void> {
    return reopenLog(this.ctlPath(id), logPath, id, timeoutMs);
  }

  /** The ctl FIFO, reached through the attach link to the bundle. */
  private ctlPath(id: string): string {
    return join(this.config.attachDir, id, 'ctl');
  }
}
