/** NRI's configuration, plugin discovery and drop-in configs, and a socket-less adaptation. */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chmod, lstat, mkdir, readFile, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { execa } from 'execa';
import { join } from 'node:path';
import { Container } from '../../../src/gen/nri/api.js';
import { parseConfig } from '../../../src/config/load.js';
import { defaultConfig, durationMs } from '../../../src/config/schema.js';
import { silentLogger } from '../../../src/common/logger.js';
import { discoverPlugins, NriAdaptation, pluginConfig } from '../../../src/nri/adaptation.js';
import { TestPlugin } from '../../helpers/nri-plugin.js';
import { eventually } from '../../helpers/wait.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

describe('nri setup', () => {
  const dir = tempDirPerTest('stove-nri-setup-');

  /** An adaptation with its socket, plugins and drop-ins in the test's dir, over a host holding `containers`. */
  function adaptation(options: { disableConnections: boolean; timeouts: { registrationMs: number; requestMs: number } }, containers: Container[] = []): NriAdaptation {
    return new NriAdaptation({
      ...options,
      socketPath: join(dir(), 'nri.sock'),
      pluginPath: join(dir(), 'plugins'),
      pluginConfigPath: join(dir(), 'conf.d'),
      runtimeName: 'stove',
      runtimeVersion: 'test',
      host: { snapshot: async () => ({ pods: [], containers }), updateContainer: async () => {} },
      log: silentLogger,
    });
  }

  it('has containerd’s keys and defaults, on by default', () => {
    assert.deepEqual(defaultConfig().nri, {
      enable: true,
      socketPath: '/var/run/nri/nri.sock',
      pluginPath: '/opt/nri/plugins',
      pluginConfigPath: '/etc/nri/conf.d',
      pluginRegistrationTimeout: '5s',
      pluginRequestTimeout: '2s',
      disableConnections: false,
      defaultValidator: {
        enable: false,
        rejectOciHookAdjustment: false,
        rejectRuntimeDefaultSeccompAdjustment: false,
        rejectUnconfinedSeccompAdjustment: false,
        rejectCustomSeccompAdjustment: false,
        rejectNamespaceAdjustment: false,
        rejectSysctlAdjustment: false,
        requiredPlugins: [],
        tolerateMissingPluginsAnnotation: '',
      },
    });
    const c = parseConfig('[nri]\nenable = true\nsocket_path = "/s.sock"\nplugin_request_timeout = "500ms"\ndisable_connections = true\n', 'f.toml');
    assert.equal(c.nri.enable, true);
    assert.equal(c.nri.socketPath, '/s.sock');
    assert.equal(durationMs(c.nri.pluginRequestTimeout), 500);
    assert.equal(c.nri.disableConnections, true);
    assert.throws(() => parseConfig('[nri]\nplugin_request_timeout = "2"\n', 'f.toml'), /f\.toml: "nri\.plugin_request_timeout" must be a positive duration/);
    assert.throws(() => parseConfig('[nri]\nplugin_registration_timeout = "0s"\n', 'f.toml'), /"nri\.plugin_registration_timeout" must be a positive duration/);
    assert.throws(() => parseConfig('[nri]\nplugin_path = "plugins"\n', 'f.toml'), /"nri\.plugin_path" must be an absolute path/);
    // [nri.default_validator] under containerd 2.4's key names.
    const v = parseConfig(
      '[nri.default_validator]\nenable = true\nreject_oci_hook_adjustment = true\nreject_sysctl_adjustment = true\nrequired_plugins = ["policy", "10-devices"]\ntolerate_missing_plugins_annotation = "tolerate-missing-nri-plugins.noderesource.dev"\n',
      'f.toml',
    ).nri.defaultValidator;
    assert.equal(v.enable, true);
    assert.equal(v.rejectOciHookAdjustment, true);
    assert.equal(v.rejectSysctlAdjustment, true);
    assert.equal(v.rejectNamespaceAdjustment, false);
    assert.deepEqual(v.requiredPlugins, ['policy', '10-devices']);
    assert.equal(v.tolerateMissingPluginsAnnotation, 'tolerate-missing-nri-plugins.noderesource.dev');
    assert.throws(() => parseConfig('[nri.default_validator]\nrequired_plugins = ["../x"]\n', 'f.toml'), /"nri\.default_validator\.required_plugins": "\.\.\/x" is not a plugin name/);
    assert.throws(() => parseConfig('[nri.default_validator]\ntolerate_missing_plugins_annotation = "a b"\n', 'f.toml'), /tolerate_missing_plugins_annotation" must be an annotation key/);
    assert.throws(() => parseConfig('[nri.default_validator]\nreject_everything = true\n', 'f.toml'), /unknown key "nri\.default_validator\.reject_everything"/);
    assert.equal(durationMs('1.5s'), 1500);
    assert.equal(durationMs('2m'), 120_000);
    assert.equal(durationMs('5'), undefined);
  });

  it('finds executables named <idx>-<name> and skips the rest', async () => {
    for (const [name, mode] of [
      ['10-good', 0o755],
      ['05-first', 0o700],
      ['20-not-executable', 0o644],
      ['badname', 0o755],
      ['1-short', 0o755],
      ['xx-letters', 0o755],
    ] as const) {
      await writeFile(join(dir(), name), '#!/bin/sh\n');
      await chmod(join(dir(), name), mode);
    }
    await mkdir(join(dir(), '30-dir'));
    assert.deepEqual(
      (await discoverPlugins(dir())).map((p) => `${p.index}/${p.name}`),
      ['05/first', '10/good'],
    );
    assert.deepEqual(await discoverPlugins(join(dir(), 'missing')), []);
  });

  it('reads <idx>-<name>.conf before <name>.conf, and nothing when neither exists', async () => {
    await writeFile(join(dir(), 'logger.conf'), 'plain');
    assert.equal(await pluginConfig(dir(), '10', 'logger'), 'plain');
    await writeFile(join(dir(), '10-logger.conf'), 'indexed');
    assert.equal(await pluginConfig(dir(), '10', 'logger'), 'indexed');
    assert.equal(await pluginConfig(dir(), '10', 'other'), '');
  });

  it('with disable_connections, listens on no socket', async () => {
    const nri = adaptation({ disableConnections: true, timeouts: { registrationMs: 500, requestMs: 500 } });
    await nri.start();
    assert.equal(existsSync(join(dir(), 'nri.sock')), false);
    await nri.stop();
  });

  it('leaves a socket another process serves alone, and replaces a stale one', async () => {
    const path = join(dir(), 'nri.sock');
    // Another runtime serving NRI on the same path.
    const other = createServer((c) => c.destroy());
    await new Promise<void>((r) => other.listen(path, r));
    const otherId = (await lstat(path)).ino;
    const statusFile = join(dir(), 'nri-plugins.json');
    const nri = new NriAdaptation({
      socketPath: path,
      pluginPath: join(dir(), 'plugins'),
      pluginConfigPath: join(dir(), 'conf.d'),
      disableConnections: false,
      timeouts: { registrationMs: 500, requestMs: 500 },
      statusFile,
      runtimeName: 'stove',
      runtimeVersion: 'test',
      host: { snapshot: async () => ({ pods: [], containers: [] }), updateContainer: async () => {} },
      log: silentLogger,
    });
    try {
      await nri.start();
      assert.equal((await lstat(path)).ino, otherId, 'the other process keeps its socket');
      const status = JSON.parse(await readFile(statusFile, 'utf8')) as { socket: string; socketProblem?: string };
      assert.equal(status.socket, '');
      assert.match(status.socketProblem ?? '', /nri\.sock is served by another process/);
      await nri.stop();
      assert.equal((await lstat(path)).ino, otherId, 'stopping does not remove the other process’s socket');
    } finally {
      await new Promise<void>((r) => other.close(() => r()));
    }
    // The other process is gone and its socket file stayed (a crash): the next start takes the path over.
    await execa(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(path)}, () => process.kill(process.pid, 'SIGKILL'))`], { reject: false });
    assert.ok((await lstat(path)).isSocket(), 'a stale socket file is left');
    const second = adaptation({ disableConnections: false, timeouts: { registrationMs: 500, requestMs: 500 } });
    await second.start();
    const p = await TestPlugin.connect(path, { name: 'late', index: '10' });
    try {
      await eventually('the plugin to register', async () => second.list().length === 1, 5000);
    } finally {
      p.close();
      await second.stop();
    }
    assert.equal(existsSync(path), false, 'its own socket is removed on stop');
  });

  it('synchronizes in several messages when the state is over the message limit', async () => {
    const big = Array.from({ length: 30 }, (_, i) => Container.fromPartial({ id: `c${i}`, env: [`X=${'x'.repeat(300_000)}`] }));
    const nri = adaptation({ disableConnections: false, timeouts: { registrationMs: 2000, requestMs: 5000 } }, big);
    await nri.start();
    const p = await TestPlugin.connect(join(dir(), 'nri.sock'), { name: 'big', index: '10' });
    try {
      await eventually('the plugin to be synchronized', async () => nri.list().length === 1, 10_000);
      assert.ok(p.syncs.length > 1, `${p.syncs.length} messages`);
      assert.deepEqual(
        p.syncs.map((s) => s.more),
        [...p.syncs.slice(1).map(() => true), false],
      );
      assert.deepEqual(
        p.syncs.flatMap((s) => s.containers.map((c) => c.id)),
        big.map((c) => c.id),
      );
    } finally {
      p.close();
      await nri.stop();
    }
  });
});
