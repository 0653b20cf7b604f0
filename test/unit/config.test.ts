import assert from 'node:assert/strict';
import { mkdtemp, writeFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseConfig, loadConfig, applyOverrides, configToToml, ConfigError } from '../../src/config/load.js';
import { defaultConfig } from '../../src/config/schema.js';

describe('config', () => {
  it('has a default for every key', () => {
    const c = defaultConfig();
    assert.equal(c.socket, '/run/stove/stove.sock');
    assert.equal(c.root, '/var/lib/stove');
    assert.equal(c.state, '/run/stove');
    assert.equal(c.runtime.cgroupDriver, 'cgroupfs');
    assert.equal(c.runtime.defaultCapabilities.length, 14);
    assert.deepEqual(c.network.cniBinDirs, ['/opt/cni/bin', '/usr/lib/cni']);
    assert.equal(c.streaming.address, '127.0.0.1');
  });

  it('takes runtime.log_size_max as -1 (unlimited, the default) or at least 8192 bytes', () => {
    assert.equal(defaultConfig().runtime.logSizeMax, -1);
    assert.equal(parseConfig('[runtime]\nlog_size_max = 1048576\n', 't.toml').runtime.logSizeMax, 1048576);
    assert.equal(parseConfig('[runtime]\nlog_size_max = -1\n', 't.toml').runtime.logSizeMax, -1);
    assert.throws(() => parseConfig('[runtime]\nlog_size_max = 100\n', 't.toml'), /log_size_max" must be -1 \(unlimited\) or at least 8192/);
    assert.throws(() => parseConfig('[runtime]\nlog_size_max = -2\n', 't.toml'), /non-negative integer/);
    assert.throws(() => parseConfig('[streaming]\nport = -1\n', 't.toml'), /non-negative integer/);
  });

  it('reads the CDI spec dirs and OCI hooks dirs, absolute paths only', () => {
    const d = defaultConfig();
    assert.deepEqual(d.cdi.specDirs, ['/etc/cdi', '/var/run/cdi']);
    assert.deepEqual(d.runtime.hooksDirs, ['/usr/share/containers/oci/hooks.d', '/etc/containers/oci/hooks.d']);
    const c = parseConfig('[runtime]\nhooks_dirs = ["/h"]\n[cdi]\nspec_dirs = ["/a", "/b"]\n', 'f.toml');
    assert.deepEqual(c.cdi.specDirs, ['/a', '/b']);
    assert.deepEqual(c.runtime.hooksDirs, ['/h']);
    assert.throws(() => parseConfig('[cdi]\nspec_dirs = ["cdi"]\n', 'f.toml'), /f\.toml: "cdi\.spec_dirs": "cdi" must be an absolute path/);
    assert.throws(() => parseConfig('[runtime]\nhooks_dirs = ["hooks.d"]\n', 'f.toml'), /"runtime\.hooks_dirs": "hooks\.d" must be an absolute path/);
  });

  it('takes images.writable_layers_dir as an absolute dir apart from the image store, root and state', () => {
    assert.equal(parseConfig('', 'f.toml').images.writableLayersDir, '');
    assert.equal(parseConfig('[images]\nwritable_layers_dir = "/mnt/containers"\n', 'f.toml').images.writableLayersDir, '/mnt/containers');
    const refused = (dir: string, message: RegExp) =>
      assert.throws(() => parseConfig(`root = "/var/lib/stove"\nstate = "/run/stove"\n[images]\nwritable_layers_dir = "${dir}"\n`, 'f.toml'), message);
    refused('containers', /f\.toml: "images\.writable_layers_dir" must be an absolute path, got "containers"/);
    refused('/var/lib/stove/images', /"images\.writable_layers_dir" is the image store \(\/var\/lib\/stove\/images\): give the writable layers a directory of their own/);
    refused('/var/lib/stove/images/', /is the image store/);
    refused('/var/lib/stove/images/../images', /is the image store/);
    refused('/var/lib/stove/writable', /must lie outside "root" \(\/var\/lib\/stove\)/);
    refused('/var/lib/stove', /must lie outside "root"/);
    refused('/var/lib', /must lie outside "root" \(\/var\/lib\/stove\) and not contain it/);
    refused('/run/stove/layers', /must lie outside "state" \(\/run\/stove\)/);
    // Checked again once the flags are applied: --root may move the store onto the dir.
    const c = parseConfig('[images]\nwritable_layers_dir = "/srv/stove/images"\n', 'f.toml');
    assert.throws(() => applyOverrides(c, { root: '/srv/stove' }), /command line: "images\.writable_layers_dir" is the image store/);
    // A sibling whose name starts like root's is outside it.
    assert.equal(parseConfig('root = "/var/lib/stove"\n[images]\nwritable_layers_dir = "/var/lib/stove-containers"\n', 'f.toml').images.writableLayersDir, '/var/lib/stove-containers');
  });

  it('takes runtime.handlers.<name>.image_store as an absolute dir no other store or tree shares', () => {
    const base = 'root = "/var/lib/stove"\nstate = "/run/stove"\n';
    const handler = (name: string, store: string, more = '') => `[runtime.handlers.${name}]\npath = "/usr/bin/crun"\nimage_store = "${store}"\n${more}`;
    assert.equal(parseConfig(base + '[runtime.handlers.crun]\npath = "/usr/bin/crun"\n', 'f.toml').runtime.handlers.crun!.imageStore, '');
    assert.equal(parseConfig(base + handler('crun', '/var/lib/stove/images-crun'), 'f.toml').runtime.handlers.crun!.imageStore, '/var/lib/stove/images-crun');
    const refused = (toml: string, message: RegExp) => assert.throws(() => parseConfig(base + toml, 'f.toml'), message);
    refused(handler('crun', 'images-crun'), /f\.toml: "runtime\.handlers\.crun\.image_store" must be an absolute path, got "images-crun"/);
    refused(handler('crun', '/var/lib/stove/images'), /"runtime\.handlers\.crun\.image_store" \("\/var\/lib\/stove\/images"\) overlaps the shared image store \(\/var\/lib\/stove\/images\): give the handler a directory of its own, e\.g\. \/var\/lib\/stove\/images-crun/);
    refused(handler('crun', '/var/lib/stove/images/crun'), /overlaps the shared image store/);
    refused(handler('crun', '/var/lib/stove/containers/crun'), /overlaps Stove's containers dir/);
    refused(handler('crun', '/run/stove/images'), /overlaps "state"/);
    refused(handler('crun', '/var/lib/stove'), /must not be "root" \(\/var\/lib\/stove\) or contain it/);
    refused(handler('crun', '/var/lib'), /must not be "root"/);
    refused(handler('crun', '/srv/images') + handler('kata', '/srv/images/kata'), /"runtime\.handlers\.kata\.image_store" \("\/srv\/images\/kata"\) overlaps "runtime\.handlers\.crun\.image_store" \(\/srv\/images\)/);
    refused('[images]\nwritable_layers_dir = "/srv/layers"\n' + handler('crun', '/srv/layers'), /overlaps "images\.writable_layers_dir"/);
    refused(handler('runc', '/srv/runc-images'), /"runtime\.handlers\.runc\.image_store": the default handler uses the shared image store/);
  });

  it('reads snake_case keys from TOML over the defaults', () => {
    const c = parseConfig(
      `log_level = "debug"
[runtime]
cgroup_driver = "systemd"
default_capabilities = ["CAP_CHOWN"]
[network]
cni_conf_dir = "/tmp/cni"
[images]
stall_timeout_seconds = 5
[registries."registry.k8s.io"]
mirrors = ["http://localhost:5000"]
[registries."localhost:5000"]
insecure = true
username = "u"
password = "p"
[runtime.handlers.crun]
path = "/usr/bin/crun"
`,
      'test.toml',
    );
    assert.equal(c.logLevel, 'debug');
    assert.equal(c.runtime.cgroupDriver, 'systemd');
    assert.deepEqual(c.runtime.defaultCapabilities, ['CAP_CHOWN']);
    assert.equal(c.network.cniConfDir, '/tmp/cni');
    assert.deepEqual(c.network.cniBinDirs, ['/opt/cni/bin', '/usr/lib/cni']);
    assert.equal(c.images.stallTimeoutSeconds, 5);
    assert.deepEqual(c.registries['registry.k8s.io']!.mirrors, ['http://localhost:5000']);
    assert.equal(c.registries['localhost:5000']!.insecure, true);
    assert.equal(c.registries['localhost:5000']!.username, 'u');
    assert.equal(c.runtime.handlers.crun!.path, '/usr/bin/crun');
  });

  it('rejects an unknown key, naming it and the file', () => {
    assert.throws(() => parseConfig('[runtime]\nrunc_path = "/x"\n', '/etc/stove/stove.toml'), (err: Error) => {
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /\/etc\/stove\/stove\.toml: unknown key "runtime\.runc_path"/);
      return true;
    });
  });

  it('rejects values of the wrong type or outside their choices', () => {
    assert.throws(() => parseConfig('socket = 3\n', 'f.toml'), /f\.toml: "socket" must be a string/);
    assert.throws(() => parseConfig('[runtime]\ncgroup_driver = "cgroupv3"\n', 'f.toml'), /"runtime\.cgroup_driver" must be "cgroupfs" or "systemd"/);
    assert.throws(() => parseConfig('log_level = "loud"\n', 'f.toml'), /"log_level" must be one of/);
    assert.throws(() => parseConfig('[images]\nmax_concurrent_downloads = -1\n', 'f.toml'), /non-negative integer/);
    assert.throws(() => parseConfig('[registries."x"]\nmirrors = ["localhost:5000"]\n', 'f.toml'), /must be an http:\/\/ or https:\/\/ URL/);
    assert.throws(() => parseConfig('socket = "relative.sock"\n', 'f.toml'), /must be an absolute path/);
    assert.throws(() => parseConfig('this is not toml', 'f.toml'), /f\.toml: invalid TOML/);
  });

  it('lets flags override the file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'stove-config-'));
    try {
      const file = join(dir, 'stove.toml');
      await writeFile(file, 'socket = "/run/a.sock"\nroot = "/var/lib/a"\n');
      const c = await loadConfig(file, { socket: '/run/b.sock', logLevel: 'warn' });
      assert.equal(c.socket, '/run/b.sock');
      assert.equal(c.root, '/var/lib/a');
      assert.equal(c.logLevel, 'warn');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('treats a missing default file as defaults but a missing named file as an error', async () => {
    await assert.rejects(loadConfig('/nonexistent/stove.toml'), /\/nonexistent\/stove\.toml: config file not found/);
    const c = defaultConfig();
    assert.throws(() => applyOverrides(c, { logLevel: 'chatty' }), /command line: "log_level"/);
  });

  it('prints TOML that parses back to the same config', () => {
    const c = parseConfig('[registries."docker.io"]\nmirrors = ["http://localhost:5000"]\n', 'a.toml');
    assert.deepEqual(parseConfig(configToToml(c), 'printed'), c);
  });
});
