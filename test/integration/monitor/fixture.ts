/**
 * A throwaway monitor setup for integration tests: runc root, exit dir, attach dir, exec dir, bundles
 * and logs under one short temp dir, and a record of every container so `cleanup()` removes them all
 * (runc delete --force, conmon killed, attach links gone) even after a failed test.
 */
import { randomBytes } from 'node:crypto';
import { readFile, rm, mkdtemp, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { createLogger, silentLogger } from '../../../src/common/logger.js';
import { Runc } from '../../../src/runtime/runc.js';
import { Monitor } from '../../../src/monitor/monitor.js';
import type { CreateContainerOptions, CreatedContainer } from '../../../src/monitor/conmon.js';
import { readPidFile, signalProcess, processStartTime } from '../../../src/monitor/process.js';
import { waitFor } from '../../helpers/wait.js';
import { makeBundle, haveBusybox, type Bundle, type BundleOptions } from '../../helpers/bundle.js';
import { TEST_RUNTIME } from '../../helpers/oci-runtime.js';

export const RUNC = TEST_RUNTIME;
export const CONMON = '/usr/bin/conmon';

/** Why integration tests cannot run here, or undefined when they can. */
export async function missingPrerequisite(): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return 'needs root';
  for (const bin of [RUNC, CONMON]) {
    try {
      await readFile(bin);
    } catch {
      return `${bin} is not installed`;
    }
  }
  if (!(await haveBusybox())) return 'busybox-static is not installed';
  return undefined;
}

export interface TestContainer extends CreatedContainer {
  id: string;
  bundle: Bundle;
  logPath: string;
  persistDir: string;
}

export class MonitorFixture {
  readonly runc: Runc;
  readonly monitor: Monitor;
  private readonly ids = new Set<string>();

  /** `top`: the temp dir that holds `base` (removed whole by cleanup). */
  private constructor(
    readonly base: string,
    private readonly top = base,
  ) {
    const log = process.env['STOVE_TEST_DEBUG'] ? createLogger('debug') : silentLogger;
    this.runc = new Runc({ binary: RUNC, root: join(base, 'runc') });
    this.monitor = new Monitor({
      conmon: CONMON,
      exitsDir: join(base, 'exits'),
      attachDir: join(base, 'attach'),
      execDir: join(base, 'exec'),
      createTimeoutMs: 30_000,
      log,
    });
  }

  /** A fixture over an existing base dir (e.g. one a parent process made). */
  static at(base: string): MonitorFixture {
    return new MonitorFixture(base);
  }

  /**
   * Under a short temp dir, or with `deep`, one whose attach sockets (<base>/attach/<id>/attach) are
   * longer than the 108 bytes of a unix socket address, as under a state dir like /var/lib/<cluster>/….
   */
  static async create(options: { deep?: boolean } = {}): Promise<MonitorFixture> {
    const top = await mkdtemp('/tmp/stm-');
    const base = options.deep ? join(top, 'a-state-dir-deep-enough-that-attach-sockets-exceed-sun-path') : top;
    await mkdir(join(base, 'logs'), { recursive: true });
    return new MonitorFixture(base, top);
  }

  get exitsDir(): string {
    return this.monitor.config.exitsDir;
  }

  get attachDir(): string {
    return this.monitor.config.attachDir;
  }

  /** A unique container ID (64 hex, as Stove's). */
  newId(): string {
    return randomBytes(32).toString('hex');
  }

  /** Writes a bundle and creates the container under conmon (runc state `created`). */
  async create(bundleOpts: BundleOptions, opts: Partial<CreateContainerOptions> = {}, id = this.newId()): Promise<TestContainer> {
    this.ids.add(id);
    const bundle = await makeBundle(this.base, id, bundleOpts);
    const logPath = opts.logPath ?? join(this.base, 'logs', `${id}.log`);
    const persistDir = join(this.base, 'persist', id);
    const created = await this.monitor.createContainer(this.runc, {
      id,
      bundle: bundle.dir,
      persistDir,
      logPath,
      tty: bundleOpts.tty,
      ...opts,
    });
    return { ...created, id, bundle, logPath, persistDir };
  }

  /** create + runc start. */
  async run(bundleOpts: BundleOptions, opts: Partial<CreateContainerOptions> = {}): Promise<TestContainer> {
    const c = await this.create(bundleOpts, opts);
    await this.runc.start(c.id);
    return c;
  }

  /** Polls the CRI log until `predicate` holds (or fails after timeoutMs). */
  async waitForLog(logPath: string, predicate: (log: string) => boolean, timeoutMs = 10_000): Promise<string> {
    let text = '';
    const read = async () => {
      text = await readFile(logPath, 'utf8').catch(() => '');
      return predicate(text) ? text : undefined;
    };
    return waitFor(`log ${logPath} to match`, read, timeoutMs).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}; it holds:\n${text}`);
    });
  }

  /** Removes one container completely. */
  async destroy(id: string): Promise<void> {
    const conmonPid = await readPidFile(join(this.base, 'bundles', id, 'conmon-pidfile'));
    await this.runc.delete(id, true).catch(() => {});
    if (conmonPid && (await processStartTime(conmonPid)) !== undefined) {
      const cmdline = await readFile(`/proc/${conmonPid}/cmdline`, 'utf8').catch(() => '');
      if (cmdline.includes(id)) signalProcess(conmonPid, 'SIGKILL');
    }
    await this.monitor.removeContainerFiles(id);
    this.ids.delete(id);
  }

  /** Removes every container and the temp dir. */
  async cleanup(): Promise<void> {
    for (const id of [...this.ids]) await this.destroy(id);
    await rm(this.top, { recursive: true, force: true });
  }
}
