/**
 * The OCI hooks of this node: `*.json` hook files in `runtime.hooks_dirs`, re-read when they change
 * (platform/config-dirs.ts). A file in a later dir masks the file of the same name in an earlier one;
 * matching hooks are injected in the order of their lower-cased file names. An invalid file (or one
 * whose hook program does not exist) is logged and skipped.
 */
import { access, constants } from 'node:fs/promises';
import { extname } from 'node:path';
import { messageOf } from '../common/errors.js';
import { loadPart } from '../common/lazy.js';
import type { Logger } from '../common/logger.js';
import { ConfigDirs, readSmallFile } from '../platform/config-dirs.js';
import type { Spec } from '../oci/index.js';
// The parser and matcher (and their RE2 engine) are imported with the first hook file: most nodes have none.
import type { HookContext, OciHookFile } from './hook-file.js';

export interface HookFileEntry {
  name: string;
  path: string;
  hook: OciHookFile;
}

export interface HooksView {
  hooks: readonly HookFileEntry[];
  rejected: readonly { path: string; reason: string }[];
}

type Loaded = OciHookFile | { reason: string };

export class OciHookRegistry {
  private readonly files: ConfigDirs<Loaded>;
  private view: HooksView = { hooks: [], rejected: [] };

  constructor(private readonly options: { hooksDirs: readonly string[]; log: Logger }) {
    this.files = new ConfigDirs<Loaded>({ dirs: options.hooksDirs, accept: (n) => extname(n) === '.json', load: (p) => this.load(p), log: options.log });
  }

  /** The hook files in effect now. */
  async current(): Promise<HooksView> {
    const { files, changed } = await this.files.scan();
    if (!changed) return this.view;
    const byName = new Map<string, HookFileEntry>();
    const rejected: HooksView['rejected'][number][] = [];
    for (const f of files) {
      if ('reason' in f.loaded) {
        rejected.push({ path: f.path, reason: f.loaded.reason });
        continue;
      }
      byName.set(f.name, { name: f.name, path: f.path, hook: f.loaded }); // later dirs come later
    }
    const hooks = [...byName.values()].sort((a, b) => (a.name.toLowerCase() < b.name.toLowerCase() ? -1 : a.name.toLowerCase() > b.name.toLowerCase() ? 1 : 0));
    this.view = { hooks, rejected };
    return this.view;
  }

  /** Adds the matching hooks to `spec` at their stages; returns the files that matched. */
  async inject(spec: Spec, ctx: Omit<HookContext, 'command'>): Promise<string[]> {
    const { hooks } = await this.current();
    if (!hooks.length) return [];
    const { matches } = await loadPart('OCI hook file parser', () => import('./hook-file.js'));
    const context: HookContext = { ...ctx, command: spec.process?.args[0] ?? '' };
    const applied: string[] = [];
    for (const entry of hooks) {
      if (!matches(entry.hook.when, context)) continue;
      spec.hooks ??= {};
      for (const stage of entry.hook.stages) (spec.hooks[stage] ??= []).push({ ...entry.hook.hook });
      applied.push(entry.path);
    }
    return applied;
  }

  private async load(path: string): Promise<Loaded> {
    try {
      const { MAX_HOOK_FILE_BYTES, parseHookFile } = await loadPart('OCI hook file parser', () => import('./hook-file.js'));
      const hook = parseHookFile(await readSmallFile(path, MAX_HOOK_FILE_BYTES));
      await access(hook.hook.path, constants.X_OK).catch((err: unknown) => {
        throw new Error(`hook program ${hook.hook.path}: ${messageOf(err)}`);
      });
      this.options.log.info('OCI hook file loaded', { path, stages: hook.stages });
      return hook;
    } catch (err) {
      this.options.log.warn('OCI hook file skipped', { path, reason: messageOf(err) });
      return { reason: messageOf(err) };
    }
  }
}
