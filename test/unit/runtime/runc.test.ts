/** Runc against a fake runtime script: argument order, stdin, JSON error extraction, error kinds. */
import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { idmapFromFeatures, Runc, RuncError, runtimeErrorKind, runtimeMessage } from '../../../src/runtime/runc.js';

/** A runtime that records its argv and stdin, then behaves as told by the subcommand. */
const FAKE_RUNTIME = `#!/bin/sh
dir=$(dirname "$0")
echo "$@" >> "$dir/calls"
for a in "$@"; do case "$a" in --*) ;; *) sub=$a; break;; esac; done
case "$sub" in
  state)
    case "$*" in
      *missing*) echo '{"level":"error","msg":"container does not exist","time":"2026-01-01T00:00:00Z"}' >&2; exit 1;;
    esac
    echo '{"ociVersion":"1.0.2","id":"c1","pid":42,"status":"running","bundle":"/b"}';;
  update) for a in "$@"; do case "$prev" in --resources) cp "$a" "$dir/stdin";; esac; prev=$a; done;;
  delete)
    case "$*" in *missing*) echo '{"level":"error","msg":"container does not exist"}' >&2; exit 1;; esac;;
  kill)
    echo '{"level":"warning","msg":"ignored"}' >&2
    echo '{"level":"error","msg":"container not running"}' >&2; exit 1;;
  list) echo 'null';;
  features) echo 'unknown command features' >&2; exit 1;;
  start) sleep 5;;
  *) echo "time=\\"x\\" level=error msg=\\"bad \\\\\\"thing\\\\\\"\\"" >&2; exit 1;;
esac
`;

describe('runtime/runc', () => {
  let dir: string;
  let runc: Runc;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stove-runc-'));
    await writeFile(join(dir, 'runtime'), FAKE_RUNTIME);
    await chmod(join(dir, 'runtime'), 0o755);
    runc = new Runc({ binary: join(dir, 'runtime'), root: join(dir, 'root'), timeoutMs: 1000 });
  });

  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const lastCall = async () => (await readFile(join(dir, 'calls'), 'utf8')).trim().split('\n').at(-1);

  it('puts --root and --log-format before the subcommand and parses state', async () => {
    const state = await runc.state('c1');
    assert.equal(await lastCall(), `--root=${join(dir, 'root')} --log-format=json state c1`);
    assert.deepEqual([state.status, state.pid], ['running', 42]);
  });

  it('an unknown container is a NotFound RuncError with runc\'s message', async () => {
    const err = await runc.state('missing').then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof RuncError);
    assert.equal(err.kind, 'NotFound');
    assert.equal(err.runtimeMessage, 'container does not exist');
    assert.equal(err.message, 'failed to get state of container "missing": container does not exist');
  });

  it('delete tolerates an unknown container and passes --force', async () => {
    await runc.delete('missing', true);
    assert.match((await lastCall())!, /delete --force missing$/);
  });

  it('kill reports the error line, not warnings, as FailedPrecondition', async () => {
    const err = await runc.kill('c1', 'KILL', true).then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof RuncError);
    assert.equal(err.runtimeMessage, 'container not running');
    assert.equal(err.kind, 'FailedPrecondition');
    assert.match((await lastCall())!, /kill --all c1 KILL$/);
  });

  it('update sends the resources as JSON in a file it removes afterwards (crun cannot read - from a socket)', async () => {
    await runc.update('c1', { cpu: { shares: 512 } });
    const file = /update --resources (\S+) c1$/.exec((await lastCall())!)?.[1];
    assert.ok(file && file !== '-', 'a file');
    await assert.rejects(readFile(file), { code: 'ENOENT' });
    assert.deepEqual(JSON.parse(await readFile(join(dir, 'stdin'), 'utf8')), { cpu: { shares: 512 } });
  });

  it('list of nothing is empty; features of a runtime without the command is undefined', async () => {
    assert.deepEqual(await runc.list(), []);
    assert.equal(await runc.features(), undefined);
    assert.equal(await runc.cachedFeatures(), undefined);
  });

  it('idmapped mounts come from the features document, not the version', () => {
    // runc 1.5.3 and crun 1.19 say so; runc 1.1.5 has no mountExtensions, crun 1.8 no features at all.
    assert.equal(idmapFromFeatures({ linux: { mountExtensions: { idmap: { enabled: true } } } }), true);
    assert.equal(idmapFromFeatures({ linux: { mountExtensions: { idmap: { enabled: false } } } }), false);
    assert.equal(idmapFromFeatures({ ociVersionMax: '1.0.2-dev', linux: { namespaces: ['user'] } }), false);
    assert.equal(idmapFromFeatures(undefined), false);
  });

  it('a hung command is killed: DeadlineExceeded', async () => {
    const err = await runc.start('c1').then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof RuncError);
    assert.equal(err.kind, 'DeadlineExceeded');
  });

  it('text-format errors are unquoted', async () => {
    const err = await runc.pause('c1').then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof RuncError);
    assert.equal(err.runtimeMessage, 'bad "thing"');
  });

  it('a missing binary is an Internal error naming it', async () => {
    const broken = new Runc({ binary: join(dir, 'nope'), root: dir });
    const err = await broken.list().then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof RuncError);
    assert.equal(err.kind, 'Internal');
    assert.match(err.message, /ENOENT|nope/);
  });

  it('runtimeMessage: JSON lines, logfmt, crun, plain text', () => {
    assert.equal(runtimeMessage('{"level":"error","msg":"a"}\n{"level":"error","msg":"b"}\n'), 'a; b');
    assert.equal(runtimeMessage('{"msg":"only","level":"error","time":"t"}'), 'only');
    assert.equal(runtimeMessage('time="t" level=error msg="exec failed: x"\n'), 'exec failed: x');
    assert.equal(runtimeMessage('  something broke \n'), 'something broke');
    assert.equal(runtimeMessage(''), '');
  });

  it('runtimeErrorKind: runc and crun wordings', () => {
    assert.equal(runtimeErrorKind('container does not exist'), 'NotFound');
    assert.equal(runtimeErrorKind('error opening file `/run/crun/x/status`: No such file or directory'), 'NotFound');
    assert.equal(runtimeErrorKind('cannot exec in a stopped container'), 'FailedPrecondition');
    assert.equal(runtimeErrorKind('kill container: No such process'), 'FailedPrecondition');
    assert.equal(runtimeErrorKind('exec: "x": executable file not found in $PATH'), 'Internal');
  });
});
