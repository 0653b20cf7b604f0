import assert from 'node:assert/strict';
import { access, readFile } from 'node:fs/promises';
import { status } from '@grpc/grpc-js';
import { REPO_ROOT, startStove, runStoveCli, type StoveProcess } from '../helpers/stove-process.js';
import { CgroupDriver } from '../../src/gen/runtime/v1/api.js';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

describe('stove serve', function () {
  let stove: StoveProcess;
  let cniDir: string;

  before(async () => {
    cniDir = await mkdtemp(join(tmpdir(), 'stove-cni-'));
    stove = await startStove({ configToml: `[network]\ncni_conf_dir = "${cniDir}"\n` });
  });

  after(async () => {
    await stove?.stop();
    await stove?.cleanup();
    await rm(cniDir, { recursive: true, force: true });
  });

  it('answers Version', async () => {
    const v = await stove.clients.runtime.version({ version: 'v1' });
    assert.equal(v.runtimeName, 'stove');
    assert.equal(v.runtimeApiVersion, 'v1');
    assert.match(v.runtimeVersion, /^\d+\.\d+\.\d+/);
  });

  it('reports NetworkReady=false until a CNI config appears, then true without a restart', async () => {
    let s = await stove.clients.runtime.status({ verbose: false });
    const cond = (type: string) => s.status!.conditions.find((c) => c.type === type)!;
    assert.equal(cond('RuntimeReady').status, true);
    assert.equal(cond('NetworkReady').status, false);
    assert.equal(cond('NetworkReady').reason, 'NetworkPluginNotReady');
    assert.match(cond('NetworkReady').message, /cni config uninitialized/);

    await writeFile(join(cniDir, '10-test.conflist'), JSON.stringify({ cniVersion: '1.0.0', name: 't', plugins: [{ type: 'loopback' }] }));
    s = await stove.clients.runtime.status({ verbose: false });
    assert.equal(cond('NetworkReady').status, true);
  });

  it('returns the effective config as JSON in verbose Status', async () => {
    const s = await stove.clients.runtime.status({ verbose: true });
    const config = JSON.parse(s.info.config!) as { socket: string; sandboxImage: string };
    assert.equal(config.socket, stove.socket);
    // where kubeadm's preflight (and `crictl info`) look for the sandbox image, as in containerd's
    assert.equal(config.sandboxImage, 'stove/pause');
  });

  it('answers RuntimeConfig with the cgroupfs driver by default', async () => {
    const r = await stove.clients.runtime.runtimeConfig({});
    assert.equal(r.linux!.cgroupDriver, CgroupDriver.CGROUPFS);
  });

  it('remembers the pod CIDR from UpdateRuntimeConfig', async () => {
    await stove.clients.runtime.updateRuntimeConfig({ runtimeConfig: { networkConfig: { podCidr: '10.99.0.0/16' } } });
    const s = await stove.clients.runtime.status({ verbose: true });
    assert.equal((JSON.parse(s.info.config!) as { podCidr: string }).podCidr, '10.99.0.0/16');
  });

  it('answers every RPC: CheckpointContainer too, NOT_FOUND for an unknown container', async () => {
    await assert.rejects(stove.clients.runtime.checkpointContainer({ containerId: 'x', location: join(stove.dir, 'x.tar'), timeout: 0n }), (err: { code: number; details: string }) => {
      assert.equal(err.code, status.NOT_FOUND);
      assert.match(err.details, /container "x" not found|"x"/);
      return true;
    });
  });

  it('refuses to start a second daemon on a live socket', async () => {
    const r = await runStoveCli(['serve', '--socket', stove.socket, '--root', join(stove.dir, 'r2'), '--state', join(stove.dir, 's2'), '--config', stove.configPath]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /another server is already listening/);
    const v = await stove.clients.runtime.version({ version: 'v1' });
    assert.equal(v.runtimeName, 'stove');
  });

  it('refuses a second daemon on the same state dir before recovering anything', async () => {
    const r = await runStoveCli(['serve', '--socket', join(stove.dir, 'other.sock'), '--root', stove.root, '--state', stove.state, '--config', stove.configPath]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, new RegExp(`another stove daemon \\(pid ${stove.child.pid}\\) is using the state dir`));
    await assert.rejects(access(join(stove.dir, 'other.sock')));
    const v = await stove.clients.runtime.version({ version: 'v1' });
    assert.equal(v.runtimeName, 'stove');
  });

  it('runs the bundle make build makes with the launcher memory settings, without the xattr addon an idle node does not use', async () => {
    const pid = stove.child.pid!;
    const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0');
    // From the build's own directory, which dist/bundle links to (scripts/bundle.mjs).
    const fromBuildDir = (arg: string) => arg.startsWith(join(REPO_ROOT, 'dist/bundle-')) && arg.endsWith('/main.js');
    assert.ok(argv.some(fromBuildDir), `not the bundle (run make setup for esbuild): ${argv.join(' ')}`);
    assert.ok(argv.includes('--max-semi-space-size=1'), argv.join(' '));
    const env = (await readFile(`/proc/${pid}/environ`, 'utf8')).split('\0');
    for (const setting of ['MALLOC_ARENA_MAX=2', 'MALLOC_MMAP_THRESHOLD_=131072', 'MALLOC_TRIM_THRESHOLD_=131072']) assert.ok(env.includes(setting), setting);
    assert.doesNotMatch(await readFile(`/proc/${pid}/maps`, 'utf8'), /xattr/);
  });

  it('exits 0 on SIGTERM and removes its socket', async () => {
    const code = await stove.stop('SIGTERM');
    assert.equal(code, 0);
    await assert.rejects(access(stove.socket));
    await assert.rejects(access(join(stove.state, 'stove.pid')));
  });
});

describe('stove CLI', () => {
  it('rejects an unknown config key with the key and file named', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'stove-cli-'));
    try {
      await writeFile(join(dir, 'bad.toml'), '[network]\ncni_dir = "/x"\n');
      const r = await runStoveCli(['config', '--config', join(dir, 'bad.toml')]);
      assert.equal(r.code, 1);
      assert.match(r.stderr, /bad\.toml: unknown key "network\.cni_dir"/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('stove check reports each requirement on its own line', async () => {
    const r = await runStoveCli(['check']);
    for (const name of ['root', 'runc', 'conmon', 'cni plugins', 'overlayfs', 'cgroups', 'iptables', 'disk'])
      assert.match(r.stdout, new RegExp(`^(ok|warn|fail) +${name} `, 'm'));
  });
});
