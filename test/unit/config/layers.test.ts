/** Drop-in config files, where each value came from, node defaults, and what a reload may change. */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configOriginLines, loadConfigLayers, parseConfig } from '../../../src/config/load.js';
import { planReload } from '../../../src/config/reload.js';
import { parseUlimit, parseUlimits } from '../../../src/config/ulimits.js';
import { defaultConfig } from '../../../src/config/schema.js';

describe('config: drop-ins and origins', () => {
  let dir: string;
  let main: string;
  let dropIns: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stove-config-'));
    main = join(dir, 'stove.toml');
    dropIns = join(dir, 'stove.d');
    await mkdir(dropIns);
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it('merges every *.toml in lexical order over the main file: tables key by key, arrays replaced', async () => {
    await writeFile(
      main,
      'log_level = "warn"\n[runtime]\ndefault_capabilities = ["CAP_CHOWN", "CAP_KILL"]\n[registries."docker.io"]\nmirrors = ["http://a:5000"]\nusername = "u"\n',
    );
    await writeFile(join(dropIns, '20-later.toml'), '[runtime]\npids_limit = 2048\n[registries."docker.io"]\nmirrors = ["http://c:5000"]\n');
    await writeFile(join(dropIns, '10-first.toml'), 'log_level = "debug"\n[runtime]\ndefault_capabilities = ["CAP_NET_RAW"]\npids_limit = 1024\n');
    await writeFile(join(dropIns, 'notes.txt'), 'not a drop-in');
    const loaded = await loadConfigLayers({ path: main, dir: dropIns });
    assert.deepEqual(loaded.files, [main, join(dropIns, '10-first.toml'), join(dropIns, '20-later.toml')]);
    assert.equal(loaded.config.logLevel, 'debug');
    assert.deepEqual(loaded.config.runtime.defaultCapabilities, ['CAP_NET_RAW'], 'arrays are replaced, not appended');
    assert.equal(loaded.config.runtime.pidsLimit, 2048, 'the later file wins');
    assert.deepEqual(loaded.config.registries['docker.io']!.mirrors, ['http://c:5000']);
    assert.equal(loaded.config.registries['docker.io']!.username, 'u', 'a registry table merges key by key');
    assert.equal(loaded.config.runtime.runc, '/usr/bin/runc', 'defaults stay for what no file sets');

    assert.equal(loaded.origins.get('log_level'), join(dropIns, '10-first.toml'));
    assert.equal(loaded.origins.get('runtime.pids_limit'), join(dropIns, '20-later.toml'));
    assert.equal(loaded.origins.get('registries.docker.io.username'), main);
    const lines = configOriginLines(loaded).split('\n');
    assert.ok(lines.includes(`runtime.pids_limit = 2048  # ${join(dropIns, '20-later.toml')}`), lines.join('\n'));
    assert.ok(lines.includes('runtime.runc = "/usr/bin/runc"  # default'));
  });

  it('names the drop-in file and the key of a bad value', async () => {
    await writeFile(main, '');
    await writeFile(join(dropIns, '50-bad.toml'), '[runtime]\npids_limt = 5\n');
    await assert.rejects(loadConfigLayers({ path: main, dir: dropIns }), new RegExp(`${join(dropIns, '50-bad.toml')}: unknown key "runtime.pids_limt"`));
    await rm(join(dropIns, '50-bad.toml'));
    await writeFile(join(dropIns, '60-bad.toml'), '[runtime]\ndefault_ulimits = ["nofile=10:5"]\n');
    await assert.rejects(
      loadConfigLayers({ path: main, dir: dropIns }),
      /60-bad\.toml: "runtime\.default_ulimits": "nofile=10:5": soft limit 10 is above the hard limit 5/,
    );
  });

  it('treats a missing default dir as empty but a missing named dir as an error', async () => {
    await writeFile(main, '');
    await assert.rejects(loadConfigLayers({ path: main, dir: join(dir, 'nope') }), /nope: config dir not found/);
  });

  it('shows where command-line flags came from, and never prints credentials', async () => {
    await writeFile(main, '[registries."r.example"]\npassword = "hunter2"\nusername = "me"\n');
    const loaded = await loadConfigLayers({ path: main, dir: dropIns, overrides: { socket: '/run/x.sock' } });
    const text = configOriginLines(loaded);
    assert.match(text, /^socket = "\/run\/x\.sock"  # command line$/m);
    assert.match(text, /^registries\.r\.example\.password = "<redacted>"/m);
    assert.doesNotMatch(text, /hunter2/);
  });
});

describe('config: node defaults', () => {
  it('parses CRI-O style ulimits', () => {
    assert.deepEqual(parseUlimit('nofile=1048576:1048576'), { type: 'RLIMIT_NOFILE', soft: 1048576, hard: 1048576 });
    assert.deepEqual(parseUlimit('nproc=100'), { type: 'RLIMIT_NPROC', soft: 100, hard: 100 });
    assert.throws(() => parseUlimit('nofiles=1:2'), /unknown rlimit "nofiles"/);
    assert.throws(() => parseUlimit('nofile=-1:2'), /name=soft:hard/);
    assert.throws(() => parseUlimit('nofile=99999999999999999999'), /too large/);
    assert.throws(() => parseUlimits(['core=0', 'core=1']), /core is set twice/);
  });

  it('takes -1 for an unlimited pids limit but refuses other negative numbers', () => {
    assert.equal(parseConfig('[runtime]\npids_limit = -1\n', 'f.toml').runtime.pidsLimit, -1);
    assert.throws(() => parseConfig('[images]\nstall_timeout_seconds = -1\n', 'f.toml'), /non-negative integer/);
  });

  it('reads runtime.image_volumes (copy by default) and device_ownership_from_security_context, refusing other modes', () => {
    assert.equal(defaultConfig().runtime.imageVolumes, 'copy');
    assert.equal(defaultConfig().runtime.deviceOwnershipFromSecurityContext, false);
    const c = parseConfig('[runtime]\nimage_volumes = "mkdir"\ndevice_ownership_from_security_context = true\n', 'f.toml');
    assert.equal(c.runtime.imageVolumes, 'mkdir');
    assert.equal(c.runtime.deviceOwnershipFromSecurityContext, true);
    assert.throws(() => parseConfig('[runtime]\nimage_volumes = "bind"\n', 'f.toml'), /f\.toml: "runtime\.image_volumes" must be one of "copy", "mkdir", "ignore", got "bind"/);
  });

  it('refuses a pinned pattern with a * anywhere but at the end', () => {
    assert.deepEqual(parseConfig('[images]\npinned = ["registry.k8s.io/pause:*"]\n', 'f.toml').images.pinned, ['registry.k8s.io/pause:*']);
    assert.throws(() => parseConfig('[images]\npinned = ["registry.k8s.io/*/pause"]\n', 'f.toml'), /"images\.pinned": "registry\.k8s\.io\/\*\/pause"/);
  });
});

describe('config: reload plan', () => {
  it('splits the changed keys into live ones and those that need a restart', () => {
    const before = defaultConfig();
    const after = defaultConfig();
    after.logLevel = 'debug';
    after.images.pinned = ['busybox:*'];
    after.registries['docker.io'] = { mirrors: ['http://m:5000'], insecure: false, username: '', password: '', auth: '', identityToken: '' };
    after.runtime.cgroupParent = '/other';
    after.socket = '/run/other.sock';
    const plan = planReload(before, after);
    assert.deepEqual(plan.live, ['images.pinned', 'log_level', 'registries.docker.io.auth', 'registries.docker.io.identity_token', 'registries.docker.io.insecure', 'registries.docker.io.mirrors', 'registries.docker.io.password', 'registries.docker.io.username']);
    assert.deepEqual(plan.restart, ['runtime.cgroup_parent', 'socket']);
  });

  it('applies runtime.image_volumes and device_ownership_from_security_context live', () => {
    const after = defaultConfig();
    after.runtime.imageVolumes = 'ignore';
    after.runtime.deviceOwnershipFromSecurityContext = true;
    assert.deepEqual(planReload(defaultConfig(), after), { live: ['runtime.device_ownership_from_security_context', 'runtime.image_volumes'], restart: [] });
  });
});
