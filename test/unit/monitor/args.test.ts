/** The conmon command lines Stove builds (CRI-O's flags for create and ExecSync, podman's for exec-attach). */
import assert from 'node:assert/strict';
import { silentLogger } from '../../../src/common/logger.js';
import { Runc } from '../../../src/runtime/runc.js';
import { checkLogPath, conmonCreateArgs, type ConmonConfig } from '../../../src/monitor/conmon.js';
import { execSyncArgs } from '../../../src/monitor/exec-sync.js';
import { execAttachArgs } from '../../../src/monitor/exec-stream.js';
import { execProcess } from '../../../src/monitor/exec-dir.js';

const config: ConmonConfig = { conmon: '/usr/bin/conmon', exitsDir: '/run/s/exits', attachDir: '/run/s/attach', execDir: '/run/s/exec', log: silentLogger };
const runc = new Runc({ binary: '/usr/bin/runc', root: '/run/s/runc' });

/** The value after a flag. */
const flag = (args: string[], name: string) => args[args.indexOf(name) + 1];

describe('monitor: conmon command lines', () => {
  it('create: CRI-O\'s flags, runtime args, log, tty/stdin variants', () => {
    const base = { id: 'c1', bundle: '/b/c1', persistDir: '/p/c1', logPath: '/logs/c1.log' };
    const args = conmonCreateArgs(config, runc, { ...base, name: 'k8s_x', logSizeMax: 1000 });
    assert.equal(flag(args, '-b'), '/b/c1');
    assert.equal(flag(args, '-c'), 'c1');
    assert.equal(flag(args, '-u'), 'c1');
    assert.equal(flag(args, '-n'), 'k8s_x');
    assert.equal(flag(args, '-r'), '/usr/bin/runc');
    assert.equal(flag(args, '--exit-dir'), '/run/s/exits');
    assert.equal(flag(args, '-l'), 'k8s-file:/logs/c1.log');
    assert.equal(flag(args, '-p'), '/b/c1/pidfile');
    assert.equal(flag(args, '-P'), '/b/c1/conmon-pidfile');
    assert.equal(flag(args, '--persist-dir'), '/p/c1');
    assert.equal(flag(args, '--socket-dir-path'), '/run/s/attach');
    assert.equal(flag(args, '--log-size-max'), '1000');
    assert.deepEqual(args.filter((_, i) => args[i - 1] === '--runtime-arg'), ['--root=/run/s/runc', '--log-format=json', '--log=/b/c1/runtime.log']);
    assert.ok(!args.includes('-t') && !args.includes('-i') && !args.includes('--syslog'));

    assert.ok(conmonCreateArgs(config, runc, { ...base, tty: true, stdin: true }).includes('-t'));
    assert.ok(!conmonCreateArgs(config, runc, { ...base, tty: true, stdin: true }).includes('-i'));
    const stdinOpen = conmonCreateArgs(config, runc, { ...base, stdin: true });
    assert.ok(stdinOpen.includes('-i') && stdinOpen.includes('--leave-stdin-open'));
    assert.ok(!conmonCreateArgs(config, runc, { ...base, stdin: true, stdinOnce: true }).includes('--leave-stdin-open'));
    assert.equal(flag(conmonCreateArgs(config, runc, { ...base, logPath: '' }), '-l'), 'none');
    assert.ok(conmonCreateArgs({ ...config, syslog: true }, runc, base).includes('--syslog'));
  });

  it('restores from CRIU images with --restore, file locks taken along', () => {
    const base = { id: 'c1', bundle: '/b/c1', persistDir: '/p/c1', logPath: '/logs/c1.log' };
    const args = conmonCreateArgs(config, runc, { ...base, restorePath: '/p/restore/checkpoint' });
    assert.equal(flag(args, '--restore'), '/p/restore/checkpoint');
    assert.ok(args.includes('--runtime-opt=--file-locks'));
    assert.ok(!conmonCreateArgs(config, runc, base).includes('--restore'));
  });

  it('rejects log paths with a colon (conmon splits -l at ":")', () => {
    assert.throws(() => checkLogPath('/var/log/pods/ns_a:b/c.log'), /must not contain ':'/);
    checkLogPath('/var/log/pods/ns_a_b/c/0.log');
    checkLogPath(undefined);
  });

  it('ExecSync: --sync, -e, the output limit, timeout and tty', () => {
    const dir = { pidFile: '/x/pidfile', logFile: '/x/log', processFile: '/x/process.json' };
    const args = execSyncArgs(config, runc, 'c1', dir, false, 5);
    assert.ok(args.includes('--sync') && args.includes('-e') && !args.includes('-t') && !args.includes('-b'));
    assert.equal(flag(args, '-T'), '15', 'conmon\'s own timeout is only a backstop');
    assert.equal(flag(args, '-l'), 'k8s-file:/x/log');
    assert.equal(flag(args, '--exec-process-spec'), '/x/process.json');
    assert.equal(flag(args, '--log-global-size-max'), String(32 * 1024 * 1024));
    assert.ok(!execSyncArgs(config, runc, 'c1', dir, true, 0).includes('-T'));
    assert.ok(execSyncArgs(config, runc, 'c1', dir, true, 0).includes('-t'));
  });

  it('exec-attach: api version 1, its own session id, dir and exit dir; never debug', () => {
    const dir = { id: 's1', dir: '/x/s1', pidFile: '/x/s1/pidfile', processFile: '/x/s1/process.json' };
    const args = execAttachArgs({ ...config, logLevel: 'debug' }, runc, 'c1', dir, false, true);
    assert.equal(flag(args, '--api-version'), '1');
    assert.equal(flag(args, '-u'), 's1');
    assert.equal(flag(args, '-b'), '/x/s1');
    assert.equal(flag(args, '--exit-dir'), '/x/s1');
    assert.equal(flag(args, '--log-level'), 'info');
    assert.ok(args.includes('--exec-attach') && args.includes('-i') && !args.includes('-t'));
    assert.ok(execAttachArgs(config, runc, 'c1', dir, true, true).includes('-t'));
    assert.ok(!execAttachArgs(config, runc, 'c1', dir, false, false).includes('-i'));
  });

  it('execProcess keeps the container\'s process settings and replaces args', () => {
    const base = { args: ['sleep', '1'], env: ['A=1'], user: { uid: 5, gid: 5 }, cwd: '/w', terminal: true, consoleSize: { height: 1, width: 2 } };
    const proc = execProcess(base, ['ls', '-l'], false);
    assert.deepEqual(proc, { args: ['ls', '-l'], env: ['A=1'], user: { uid: 5, gid: 5 }, cwd: '/w', terminal: false });
    assert.deepEqual(base.args, ['sleep', '1'], 'base untouched');
  });
});
