import assert from 'node:assert/strict';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { matches, parseHookFile, type HookContext } from '../../../src/oci-hooks/hook-file.js';
import { OciHookRegistry } from '../../../src/oci-hooks/registry.js';
import { silentLogger } from '../../../src/common/logger.js';
import type { Spec } from '../../../src/oci/types.js';

const file = (when: Record<string, unknown>, stages = ['poststop'], hook: Record<string, unknown> = { path: '/bin/true' }) =>
  JSON.stringify({ version: '1.0.0', hook, when, stages });

const ctx = (c: Partial<HookContext> = {}): HookContext => ({ annotations: {}, command: '/bin/sh', hasBindMounts: false, ...c });

describe('oci hook files', () => {
  it('parses the 1.0.0 schema; prestart is injected as createRuntime', () => {
    const h = parseHookFile(file({ always: true }, ['prestart', 'createRuntime', 'poststop'], { path: '/usr/bin/x', args: ['x', 'a'], env: ['A=1'], timeout: 3 }));
    assert.deepEqual(h.hook, { path: '/usr/bin/x', args: ['x', 'a'], env: ['A=1'], timeout: 3 });
    assert.deepEqual(h.stages, ['createRuntime', 'poststop']);
  });

  it('rejects other versions, missing parts, bad stages and bad regexes with why', () => {
    const bad = (text: string, re: RegExp) => assert.throws(() => parseHookFile(text), re);
    bad(JSON.stringify({ hook: '/bin/true', stages: ['prestart'] }), /unsupported hook version "": Stove reads version "1\.0\.0"/);
    bad(JSON.stringify({ version: '1.0.0', when: { always: true }, stages: [] }), /missing required property: hook/);
    bad(file({ always: true }, ['poststop'], { path: 'true' }), /must be absolute/);
    bad(file({}), /at least one condition/);
    bad(file({ always: true }, ['beforeStart']), /unknown stage "beforeStart"/);
    bad(file({ commands: ['(unclosed'] }), /invalid command "\(unclosed"/);
    bad(JSON.stringify({ version: '1.0.0', hook: { path: '/bin/true' }, when: { always: true } }), /missing required property: stages/);
    bad('{', /not valid JSON/);
  });

  it('matches when every condition set holds', () => {
    const w = (when: Record<string, unknown>) => parseHookFile(file(when)).when;
    assert.equal(matches(w({ always: true }), ctx()), true);
    assert.equal(matches(w({ always: false }), ctx()), false);
    assert.equal(matches(w({ hasBindMounts: true }), ctx()), false);
    assert.equal(matches(w({ hasBindMounts: true }), ctx({ hasBindMounts: true })), true);
    const ann = w({ annotations: { '^com\\.example\\.gpu$': 'yes' } });
    assert.equal(matches(ann, ctx({ annotations: { 'com.example.gpu': 'oh yes' } })), true);
    assert.equal(matches(ann, ctx({ annotations: { 'com.example.gpu': 'no' } })), false);
    assert.equal(matches(ann, ctx({ annotations: { 'xcom.example.gpu': 'yes' } })), false);
    const cmd = w({ commands: ['.*/init$', '^sleep$'] });
    assert.equal(matches(cmd, ctx({ command: '/sbin/init' })), true);
    assert.equal(matches(cmd, ctx({ command: 'sleep' })), true);
    assert.equal(matches(cmd, ctx({ command: '/bin/sleep' })), false);
    // Linear time on hostile input (a backtracking engine would take ages here).
    const started = performance.now();
    assert.equal(matches(w({ annotations: { '^x$': '^(a+)+$' } }), ctx({ annotations: { x: 'a'.repeat(50_000) + '!' } })), false);
    assert.ok(performance.now() - started < 2000);
    // Both set: both must hold.
    const both = w({ always: true, annotations: { a: 'b' } });
    assert.equal(matches(both, ctx({ annotations: { a: 'b' } })), true);
    assert.equal(matches(both, ctx()), false);
  });
});

describe('oci hook registry', () => {
  let dir: string;
  let program: string;
  const spec = (): Spec => ({ ociVersion: '1.0.2', process: { user: { uid: 0, gid: 0 }, args: ['/bin/worker', '-x'], cwd: '/' }, annotations: { 'io.example/trace': 'on' } });

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stove-hooks-'));
    await mkdir(join(dir, 'usr'));
    await mkdir(join(dir, 'etc'));
    program = join(dir, 'hook.sh');
    await writeFile(program, '#!/bin/sh\n');
    await chmod(program, 0o755);
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('injects matching hooks by lower-cased file name; a later dir masks a file of the same name', async () => {
    const hook = (args: string[]) => ({ path: program, args });
    await writeFile(join(dir, 'usr', '10-trace.json'), file({ annotations: { 'io\\.example/trace': 'on' } }, ['createRuntime'], hook(['usr-trace'])));
    await writeFile(join(dir, 'usr', '20-masked.json'), file({ always: true }, ['poststop'], hook(['usr-masked'])));
    await writeFile(join(dir, 'etc', '20-masked.json'), file({ commands: ['^/bin/worker$'] }, ['poststart', 'poststop'], hook(['etc-masked'])));
    await writeFile(join(dir, 'etc', '05-NOMATCH.json'), file({ commands: ['^nginx$'] }, ['poststop'], hook(['nomatch'])));
    await writeFile(join(dir, 'etc', 'bad.json'), file({ always: true }, ['poststop'], { path: join(dir, 'missing') }));
    const registry = new OciHookRegistry({ hooksDirs: [join(dir, 'usr'), join(dir, 'etc')], log: silentLogger });
    const s = spec();
    const applied = await registry.inject(s, { annotations: s.annotations!, hasBindMounts: false });
    assert.deepEqual(applied, [join(dir, 'usr', '10-trace.json'), join(dir, 'etc', '20-masked.json')]);
    assert.deepEqual(s.hooks, {
      createRuntime: [{ path: program, args: ['usr-trace'] }],
      poststart: [{ path: program, args: ['etc-masked'] }],
      poststop: [{ path: program, args: ['etc-masked'] }],
    });
    const view = await registry.current();
    assert.equal(view.rejected.length, 1);
    assert.match(view.rejected[0]!.reason, /hook program .*missing: ENOENT/);
  });

  it('notices a hook file added after it started', async () => {
    const registry = new OciHookRegistry({ hooksDirs: [join(dir, 'usr')], log: silentLogger });
    assert.deepEqual(await registry.inject(spec(), { annotations: {}, hasBindMounts: true }), []);
    await writeFile(join(dir, 'usr', 'mounts.json'), file({ hasBindMounts: true }, ['createContainer'], { path: program }));
    const s = spec();
    assert.deepEqual(await registry.inject(s, { annotations: {}, hasBindMounts: true }), [join(dir, 'usr', 'mounts.json')]);
    assert.deepEqual(s.hooks, { createContainer: [{ path: program }] });
  });
});
