/**
 * One OCI hook file (`oci-hooks(5)`, schema 1.0.0, as CRI-O and Podman read them):
 *
 *   { "version": "1.0.0",
 *     "hook":   { "path": "/usr/bin/x", "args": ["x", "prestart"], "env": ["A=b"], "timeout": 5 },
 *     "when":   { "always": true, "annotations": {"key regex": "value regex"}, "commands": ["regex"],
 *                 "hasBindMounts": true },
 *     "stages": ["createRuntime", "poststop"] }
 *
 * Every condition set in `when` must hold; `commands` match `process.args[0]`. `prestart` is injected
 * as `createRuntime`, as containers/common does (the runtime spec deprecates prestart). Regular
 * expressions are Go's (RE2) syntax and unanchored searches, as `regexp.MatchString`, matched in linear
 * time (re2js): annotation values come from requests, and a backtracking engine would let one hang
 * the daemon on a pattern such as `(a+)+$`.
 */
import { RE2JS } from 're2js';
import type { OciHook as Hook, OciHookStage as HookStage } from '../oci/index.js';

/** Hook files larger than this are rejected unread. */
export const MAX_HOOK_FILE_BYTES = 1 << 20;

const STAGES: readonly string[] = ['prestart', 'createRuntime', 'createContainer', 'startContainer', 'poststart', 'poststop'];

/** A compiled regular expression. */
export interface Pattern {
  /** Whether it matches somewhere in `s`. */
  test(s: string): boolean;
}

export interface HookWhen {
  always?: boolean;
  annotations: { key: Pattern; value: Pattern }[];
  commands: Pattern[];
  hasBindMounts?: boolean;
}

export interface OciHookFile {
  hook: Hook;
  when: HookWhen;
  /** Where it is injected (prestart already mapped to createRuntime). */
  stages: Exclude<HookStage, 'prestart'>[];
}

/** What a hook's `when` is matched against. */
export interface HookContext {
  annotations: Readonly<Record<string, string>>;
  /** `process.args[0]`. */
  command: string;
  /** The container has bind mounts from the host (CRI mounts). */
  hasBindMounts: boolean;
}

/** Parses and checks a hook file's text; throws an Error saying what is wrong. */
export function parseHookFile(text: string): OciHookFile {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (err) {
    throw new Error(`not valid JSON: ${(err as Error).message}`);
  }
  if (!isObject(data)) throw new Error('want a JSON object');
  if (data.version !== '1.0.0') {
    throw new Error(`unsupported hook version ${JSON.stringify(data.version ?? '')}: Stove reads version "1.0.0" hook files`);
  }
  return { hook: hook(data.hook), when: when(data.when), stages: stages(data.stages) };
}

function hook(data: unknown): Hook {
  if (!isObject(data)) throw new Error('missing required property: hook');
  if (typeof data.path !== 'string' || !data.path) throw new Error('missing required property: hook.path');
  if (!data.path.startsWith('/')) throw new Error(`hook.path "${data.path}" must be absolute`);
  const out: Hook = { path: data.path };
  if (data.args !== undefined) out.args = strings(data.args, 'hook.args');
  if (data.env !== undefined) out.env = strings(data.env, 'hook.env');
  if (data.timeout !== undefined) {
    if (typeof data.timeout !== 'number' || !Number.isInteger(data.timeout) || data.timeout <= 0) throw new Error('hook.timeout must be a positive integer');
    out.timeout = data.timeout;
  }
  return out;
}

function when(data: unknown): HookWhen {
  if (!isObject(data)) throw new Error('missing required property: when');
  const out: HookWhen = { annotations: [], commands: [] };
  for (const key of ['always', 'hasBindMounts'] as const) {
    if (data[key] === undefined) continue;
    if (typeof data[key] !== 'boolean') throw new Error(`when.${key} must be true or false`);
    out[key] = data[key];
  }
  if (data.annotations !== undefined) {
    if (!isObject(data.annotations)) throw new Error('when.annotations must map key regexes to value regexes');
    for (const [k, v] of Object.entries(data.annotations)) {
      if (typeof v !== 'string') throw new Error(`when.annotations: value of "${k}" is not a string`);
      out.annotations.push({ key: regex(k, 'annotation key'), value: regex(v, 'annotation value') });
    }
  }
  if (data.commands !== undefined) out.commands = strings(data.commands, 'when.commands').map((c) => regex(c, 'command'));
  if (out.always === undefined && out.hasBindMounts === undefined && !out.annotations.length && !out.commands.length) {
    throw new Error('when: at least one condition (always, annotations, commands, hasBindMounts) is required');
  }
  return out;
}

function stages(data: unknown): OciHookFile['stages'] {
  if (data === undefined) throw new Error('missing required property: stages');
  const list = strings(data, 'stages');
  const out = new Set<OciHookFile['stages'][number]>();
  for (const s of list) {
    if (!STAGES.includes(s)) throw new Error(`unknown stage "${s}"`);
    out.add(s === 'prestart' ? 'createRuntime' : (s as OciHookFile['stages'][number]));
  }
  return [...out];
}

/** Whether every condition of `when` holds (containers/common `When.Match`). */
export function matches(w: HookWhen, ctx: HookContext): boolean {
  let matched = 0;
  if (w.always !== undefined) {
    if (!w.always) return false;
    matched++;
  }
  if (w.hasBindMounts !== undefined) {
    if (!(w.hasBindMounts && ctx.hasBindMounts)) return false;
    matched++;
  }
  for (const { key, value } of w.annotations) {
    const hit = Object.entries(ctx.annotations).some(([k, v]) => key.test(k) && value.test(v));
    if (!hit) return false;
    matched++;
  }
  if (w.commands.length) return w.commands.some((c) => c.test(ctx.command));
  return matched > 0;
}

function regex(source: string, what: string): Pattern {
  try {
    const re = RE2JS.compile(source);
    return { test: (s) => re.matcher(s).find() };
  } catch (err) {
    throw new Error(`invalid ${what} ${JSON.stringify(source)}: ${(err as Error).message}`);
  }
}

function strings(v: unknown, where: string): string[] {
  if (!Array.isArray(v) || !v.every((s) => typeof s === 'string')) throw new Error(`${where} must be a list of strings`);
  return v;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
