/**
 * The pause container: Stove's own `rootfs/pause` (never an image pull), run by the pod's OCI runtime
 * under conmon like any container, so it outlives a restart of Stove. Its bundle is
 * `<pod state dir>/bundle` (config.json; conmon's pid files and the exit record go there too).
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { poll } from '../common/poll.js';
import type { Monitor } from '../monitor/monitor.js';
import type { ExitRecord } from '../monitor/exits.js';
import { isSameProcessAlive, ProcessProbes, signalProcess } from '../monitor/process.js';
import { specToJson, type Spec } from '../oci/index.js';
import type { RuntimeHandlerSet } from '../runtime/handlers.js';

/** What status reports as the pause "image". */
export const PAUSE_IMAGE_NAME = 'stove/pause';

/** A started pause container. */
export interface PauseProcess {
  pid: number;
  pidStartTime: bigint;
  conmonPid: number;
  conmonStartTime: bigint;
}

/** A process identified by pid and /proc start time (safe against pid reuse). */
export interface ProcessRef {
  pid: number;
  startTime: bigint;
}

/** The pause process and its conmon, when known. */
export interface PauseRefs {
  pause?: ProcessRef;
  conmon?: ProcessRef;
}

/** The refs of a pause process (pid 0: none) and its conmon. */
export function pauseRefs(pid: number, startTime: bigint, conmonPid: number, conmonStartTime: bigint): PauseRefs {
  return { pause: pid ? { pid, startTime } : undefined, conmon: { pid: conmonPid, startTime: conmonStartTime } };
}

/** What the sandbox service needs from the pause container's runtime (faked in unit tests). */
export interface PauseRuntime {
  /**
   * Writes the bundle and creates the container under conmon (runtime state `created`). With `ready`,
   * the monitor may start at once, but the bundle is written and the container created only once
   * `ready` resolves (the spec may change until then); if it rejects, so does create, leaving nothing.
   */
  create(id: string, handler: string, bundleDir: string, spec: Spec, ready?: Promise<unknown>): Promise<PauseProcess>;
  /** Runs the pause process of a created container. */
  start(id: string, handler: string): Promise<void>;
  /**
   * Kills the pause process if it runs and deletes the runtime's container (and so its cgroup). With
   * the conmon that monitors it, also waits for conmon's exit record and returns it. Idempotent: an
   * unknown container is fine.
   */
  destroy(id: string, handler: string, refs?: PauseRefs): Promise<ExitRecord | undefined>;
  /** Removes conmon's files outside the bundle (attach link, exit record). */
  forget(id: string): Promise<void>;
  /** The recorded exit of the pause container, if conmon wrote one. */
  readExit(id: string): Promise<ExitRecord | undefined>;
  /** True while the process with this pid and start time runs. */
  isAlive(pid: number, startTime: bigint): Promise<boolean>;
}

/** How long to wait for conmon's exit record after the pause process was killed. */
const EXIT_RECORD_WAIT_MS = 2000;

/** The pause container through conmon and the runtime handlers. */
export class ConmonPauseRuntime implements PauseRuntime {
  /** An open /proc stat fd per pause process, which status calls check on every call. */
  private readonly probes = new ProcessProbes();

  constructor(
    private readonly monitor: Monitor,
    private readonly runtimes: RuntimeHandlerSet,
  ) {}

  async create(id: string, handler: string, bundleDir: string, spec: Spec, ready?: Promise<unknown>): Promise<PauseProcess> {
    const runtime = this.runtimes.get(handler);
    await mkdir(bundleDir, { recursive: true, mode: 0o700 });
    // conmon starts now and sets itself up while the pod's other steps finish; it runs `runc create`
    // only once the bundle is written.
    const writeBundle = async () => {
      await ready;
      await writeFile(join(bundleDir, 'config.json'), specToJson(spec), { mode: 0o600 });
    };
    // No log (-l none) and no stdin: the pause process never writes anything worth keeping.
    const created = await this.monitor.createContainer(runtime, {
      id,
      name: `pause-${id.slice(0, 12)}`,
      bundle: bundleDir,
      persistDir: bundleDir,
      beforeStart: writeBundle,
    });
    return { pid: created.pid, pidStartTime: created.pidStartTime, conmonPid: created.conmonPid, conmonStartTime: created.conmonStartTime };
  }

  async start(id: string, handler: string): Promise<void> {
    await this.runtimes.get(handler).start(id);
  }

  async destroy(id: string, handler: string, refs: PauseRefs = {}): Promise<ExitRecord | undefined> {
    try {
      const runtime = this.runtimes.get(handler);
      let exit: ExitRecord | undefined;
      // Signalling directly saves a process spawn and `runc delete --force`'s fixed 100 ms poll; the
      // start time makes sure the pid still names the pause process.
      if (refs.pause && (await isSameProcessAlive(refs.pause.pid, refs.pause.startTime))) {
        signalProcess(refs.pause.pid, 'SIGKILL');
      }
      if (refs.conmon) exit = await this.waitForExitRecord(id, refs.conmon);
      // Stopped: delete only; still running (no refs, or the kill did not land): runc kills it first.
      await runtime.delete(id, true);
      return exit ?? (await this.monitor.readExit(id));
    } finally {
      // Last, so that a status call during the stop cannot leave an fd held on the pause process.
      if (refs.pause) this.probes.release(refs.pause.pid);
    }
  }

  forget(id: string): Promise<void> {
    return this.monitor.removeContainerFiles(id);
  }

  readExit(id: string): Promise<ExitRecord | undefined> {
    return this.monitor.readExit(id);
  }

  isAlive(pid: number, startTime: bigint): Promise<boolean> {
    return Promise.resolve(this.probes.isAlive(pid, startTime));
  }

  /** conmon writes the exit record once it has reaped the pause process, then exits. */
  private async waitForExitRecord(id: string, conmon: ProcessRef): Promise<ExitRecord | undefined> {
    // null: conmon is gone, so its exit record is there now or never will be (one last read).
    const exit = await poll(
      async () => (await this.monitor.readExit(id)) ?? ((await isSameProcessAlive(conmon.pid, conmon.startTime)) ? undefined : null),
      { timeoutMs: EXIT_RECORD_WAIT_MS, intervalMs: 5, maxIntervalMs: 20 },
    );
    return exit === null ? this.monitor.readExit(id) : exit;
  }
}
