/**
 * Rebuilding under a running daemon. scripts/bundle.mjs writes each build into a directory of its own and
 * switches the dist/bundle link, so the daemon keeps loading its lazily loaded parts (here the registry
 * client and the unpack worker, both first used by a pull) from the build it started from, and a later
 * build removes that directory only once no process runs from it. The builds are made in a copy of the
 * install dir whose compiled registry client the test changes, as an upgrade would.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { appendFile, copyFile, cp, lstat, mkdir, mkdtemp, readdir, readFile, readlink, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { PullImageRequest } from '../../src/gen/runtime/v1/api.js';
import { pushBusyboxImage, type PushedImage } from '../helpers/image-builder.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { REPO_ROOT, startStove, type StoveProcess } from '../helpers/stove-process.js';

describe('stove serve across rebuilds', function () {
  // Four esbuild runs: about 3 s each on an idle machine, 12 s on a busy one.
  this.timeout(300_000);
  let install: string;
  let registry: TestRegistry;
  let img: PushedImage;
  let stove: StoveProcess | undefined;

  before(async () => {
    install = await mkdtemp(join(tmpdir(), 'stove-install-'));
    await cp(join(REPO_ROOT, 'dist/src'), join(install, 'dist/src'), { recursive: true });
    await mkdir(join(install, 'bin'));
    await copyFile(join(REPO_ROOT, 'bin/stove'), join(install, 'bin/stove'));
    await copyFile(join(REPO_ROOT, 'package.json'), join(install, 'package.json'));
    for (const shared of ['node_modules', 'rootfs', 'src', 'dist/libexec']) await symlink(join(REPO_ROOT, shared), join(install, shared));
    registry = await startRegistry();
    img = await pushBusyboxImage(registry, 'rebuild/busybox:1');
  });

  after(async () => {
    await stove?.stop();
    await stove?.cleanup();
    await registry?.stop();
    await rm(install, { recursive: true, force: true });
  });

  /** `make bundle` in the install dir; the name of the directory dist/bundle links to afterwards. */
  async function build(): Promise<string> {
    await execa(process.execPath, [join(REPO_ROOT, 'scripts/bundle.mjs')], { cwd: install });
    return readlink(join(install, 'dist/bundle'));
  }

  /** Changes the compiled registry client, so that the next build names its chunk differently. */
  async function upgradeRegistryClient(n: number): Promise<void> {
    await appendFile(join(install, 'dist/src/images/undici-api.js'), `\nglobalThis.stoveRebuildTest = ${n};\n`);
  }

  const buildDirs = async () => (await readdir(join(install, 'dist'))).filter((entry) => entry.startsWith('bundle-')).sort();
  const registryClientChunk = async (dir: string) => (await readdir(join(install, 'dist', dir))).find((f) => /^undici-api-\w+\.js$/.test(f));

  it('loads parts from the build it started from after two rebuilds; the next build once it is gone removes that', async () => {
    // dist/bundle as a plain directory, as builds made it before: replaced by the link.
    await mkdir(join(install, 'dist/bundle'));
    await writeFile(join(install, 'dist/bundle/main.js'), '');
    const first = await build();
    assert.ok((await lstat(join(install, 'dist/bundle'))).isSymbolicLink());
    stove = await startStove({ bin: join(install, 'bin/stove') });
    const argv = (await readFile(`/proc/${stove.child.pid}/cmdline`, 'utf8')).split('\0');
    assert.ok(argv.includes(join(install, 'dist', first, 'main.js')), argv.join(' '));

    await upgradeRegistryClient(1);
    const second = await build();
    await upgradeRegistryClient(2);
    const third = await build();
    assert.equal(new Set([first, second, third]).size, 3, `builds: ${first} ${second} ${third}`);
    // What a build in place would have left the daemon: a registry client chunk of another name.
    assert.notEqual(await registryClientChunk(third), await registryClientChunk(first));
    // The current build, the one before it, and the one the daemon runs.
    assert.deepEqual(await buildDirs(), [first, second, third].sort());

    const pulled = await stove.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image: img.reference } }));
    assert.equal(pulled.imageRef, img.configDigest);
    assert.doesNotMatch(stove.output(), /cannot load Stove's/);

    assert.equal(await stove.stop(), 0);
    // What a build interrupted half-way leaves (its pid above any pid_max): removed by the next.
    const abandoned = join(install, 'dist', `.${first}.99999999`);
    await cp(join(install, 'dist', first), abandoned, { recursive: true });
    await upgradeRegistryClient(3);
    const fourth = await build();
    assert.deepEqual(await buildDirs(), [third, fourth].sort());
    assert.equal(existsSync(abandoned), false);
  });
});
