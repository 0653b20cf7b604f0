/**
 * AppArmor on a node that has it (the guest's Debian kernel, with the apparmor package's parser):
 * Stove loads `stove-default` itself, runs RuntimeDefault containers and containers that ask for no
 * profile under it, leaves privileged ones unconfined, applies a Localhost profile the node loaded and
 * refuses one it did not. What the profile denies is shown against the same container unconfined, with
 * the masked and read-only paths and capabilities that would hide it out of the way. Runs in the guest
 * (make test-vm); skipped on a host without AppArmor.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { ContainerFilter, SecurityProfile_ProfileType, type ContainerConfig, type DeepPartial, type PodSandboxConfig } from '../../../src/gen/runtime/v1/api.js';
import { appArmorEnabled, appArmorProfileMode } from '../../../src/platform/proc.js';
import { REPO_ROOT } from '../../helpers/stove-process.js';
import { suiteHooks } from '../../helpers/suite.js';
import { waitFor } from '../../helpers/wait.js';
import { ContainerWorld, rejectsWith, skipReason as containerSkipReason } from '../../integration/container/world.js';

const PARSER = '/usr/sbin/apparmor_parser';
/** A profile the test loads as a node's operator would: every write denied (as critest's). */
const DENY_WRITE = 'stove-test-deny-write';
const DENY_WRITE_TEXT = `#include <tunables/global>
profile ${DENY_WRITE} flags=(attach_disconnected) {
  #include <abstractions/base>
  file,
  deny /** w,
}
`;

async function skipReason(): Promise<string | undefined> {
  if (!(await appArmorEnabled())) return 'needs a node with AppArmor enabled (test/vm/run.sh boots one)';
  // Nothing of it depends on the cgroup driver: make test-vm runs it in the systemd run only.
  if (process.env.STOVE_VM && process.env.STOVE_TEST_CGROUP_DRIVER === 'cgroupfs') return 'the systemd run covers it (nothing of it depends on the cgroup driver)';
  if (!(await execa(PARSER, ['--version'], { reject: false })).stdout) return `needs ${PARSER} (Debian's apparmor package)`;
  return containerSkipReason();
}

const unloadProfile = (name: string) => execa(PARSER, ['-R'], { input: `profile ${name} {}\n`, reject: false });

describe('AppArmor on a node that has it (guest)', function () {
  this.timeout(300_000);
  const world = new ContainerWorld();

  suiteHooks({
    what: 'AppArmor tests',
    skipReason,
    setup: async () => {
      // A daemon of an earlier suite in this boot may have loaded it: this daemon is to load it itself.
      await unloadProfile('stove-default');
      await world.start();
    },
    tidy: async () => {
      await world.removeAll().catch(() => {});
      await unloadProfile(DENY_WRITE);
    },
    leftovers: () => world.leftovers(),
    cleanup: () => world.cleanup(),
  });

  /** A pod (privileged when asked) and a sleeper container in it with `c` over the defaults. */
  async function sleeper(c: DeepPartial<ContainerConfig>, privileged = false): Promise<{ id: string; pid: number }> {
    const podConfig: DeepPartial<PodSandboxConfig> = privileged ? { linux: { securityContext: { privileged: true } } } : {};
    const pod = await world.pod(podConfig);
    const id = await world.run(pod, world.config('sleeper', c));
    return { id, pid: (await world.info(id)).pid };
  }

  /**
   * A container that can reach what the profile guards: CAP_SYS_ADMIN for mount, and masked and read-only
   * path lists of its own (the kubelet's defaults would cover /proc/sysrq-trigger, /proc/sys and
   * /sys/firmware with mounts of their own, which deny first).
   */
  const exposed = (apparmor: { profileType: SecurityProfile_ProfileType; localhostRef?: string }): DeepPartial<ContainerConfig> => ({
    linux: { securityContext: { apparmor, capabilities: { addCapabilities: ['SYS_ADMIN'] }, maskedPaths: ['/proc/asound'], readonlyPaths: ['/proc/bus'] } },
  });

  const sh = (id: string, script: string) => world.exec(id, ['sh', '-c', script]);

  it('loads stove-default at start and runs a container that asks for nothing under it', async () => {
    // Loaded in the background: the daemon serves meanwhile, and a create that needs it waits for it.
    await waitFor('the daemon to load stove-default', async () => /AppArmor: loaded the default profile/.test(world.daemon.output()) || undefined, 120_000);
    assert.equal(await appArmorProfileMode('stove-default'), 'enforce', 'the daemon loaded its profile');
    const { id, pid } = await sleeper({});
    assert.equal((await readFile(`/proc/${pid}/attr/current`, 'utf8')).trim(), 'stove-default (enforce)');
    assert.equal((await world.exec(id, ['cat', '/proc/self/attr/current'])).stdout.trim(), 'stove-default (enforce)', 'an exec runs under it too');
    assert.equal((await world.info(id)).runtimeSpec.process.apparmorProfile, 'stove-default');
  });

  it('confines RuntimeDefault: /proc/sysrq-trigger, /sys/firmware and mount are denied where unconfined they are not', async () => {
    const confined = await sleeper(exposed({ profileType: SecurityProfile_ProfileType.RuntimeDefault }));
    const unconfined = await sleeper(exposed({ profileType: SecurityProfile_ProfileType.Unconfined }));
    assert.equal((await world.exec(confined.id, ['cat', '/proc/self/attr/current'])).stdout.trim(), 'stove-default (enforce)');
    assert.equal((await world.exec(unconfined.id, ['cat', '/proc/self/attr/current'])).stdout.trim(), 'unconfined');

    // SysRq 'h' only prints the help to the kernel log.
    const sysrq = 'echo h > /proc/sysrq-trigger';
    const denied = await sh(confined.id, sysrq);
    assert.notEqual(denied.exitCode, 0);
    assert.match(denied.stderr, /Permission denied/);
    assert.equal((await sh(unconfined.id, sysrq)).exitCode, 0, 'unconfined, the same write goes through');

    const mount = 'mkdir -p /mnt/t && mount -t tmpfs none /mnt/t';
    const mountDenied = await sh(confined.id, mount);
    assert.notEqual(mountDenied.exitCode, 0, 'mount fails under stove-default');
    assert.match(mountDenied.stderr, /Permission denied/);
    const mounted = await sh(unconfined.id, mount);
    assert.equal(mounted.exitCode, 0, `unconfined with CAP_SYS_ADMIN it mounts: ${mounted.stderr}`);

    // What is below /sys/firmware (the directory itself may be listed).
    const firmware = 'ls /sys/firmware/*/';
    const firmwareDenied = await sh(confined.id, firmware);
    assert.notEqual(firmwareDenied.exitCode, 0);
    assert.match(firmwareDenied.stderr, /Permission denied/);
    const firmwareRead = await sh(unconfined.id, firmware);
    assert.equal(firmwareRead.exitCode, 0, firmwareRead.stderr);

    // What a container needs still works: its own files, signals among its processes.
    const ordinary = await sh(confined.id, 'echo x > /tmp/f; cat /tmp/f; sleep 30 & kill $! && wait $!; echo "signal $?"');
    assert.equal(ordinary.stdout.trim(), 'x\nsignal 143', ordinary.stderr);
  });

  it('leaves a privileged container unconfined', async () => {
    const asked = await sleeper({ linux: { securityContext: { privileged: true, apparmor: { profileType: SecurityProfile_ProfileType.RuntimeDefault } } } }, true);
    assert.equal((await readFile(`/proc/${asked.pid}/attr/current`, 'utf8')).trim(), 'unconfined');
    const unasked = await sleeper({ linux: { securityContext: { privileged: true } } }, true);
    assert.equal((await world.exec(unasked.id, ['cat', '/proc/self/attr/current'])).stdout.trim(), 'unconfined');
  });

  it('applies a Localhost profile the node loaded, and refuses one it did not, naming it', async () => {
    await execa(PARSER, ['-r', '-W'], { input: DENY_WRITE_TEXT });
    const { id, pid } = await sleeper({ linux: { securityContext: { apparmor: { profileType: SecurityProfile_ProfileType.Localhost, localhostRef: `localhost/${DENY_WRITE}` } } } });
    assert.equal((await readFile(`/proc/${pid}/attr/current`, 'utf8')).trim(), `${DENY_WRITE} (enforce)`);
    const touch = await world.exec(id, ['touch', '/tmp/x']);
    assert.notEqual(touch.exitCode, 0);
    assert.match(touch.stderr, /Permission denied/);

    const pod = await world.pod();
    const missing = 'stove-test-not-loaded';
    const create = world.create(pod, world.config('sleeper', { linux: { securityContext: { apparmor: { profileType: SecurityProfile_ProfileType.Localhost, localhostRef: `localhost/${missing}` } } } }));
    await rejectsWith(create, 'FAILED_PRECONDITION', new RegExp(`AppArmor profile "${missing}" \\(Localhost\\) is not loaded on this node`));
    await rejectsWith(world.create(pod, world.config('sleeper', { linux: { securityContext: { apparmorProfile: `localhost/${missing}` } } })), 'FAILED_PRECONDITION', new RegExp(missing));
    assert.deepEqual((await world.daemon.clients.runtime.listContainers({ filter: ContainerFilter.fromPartial({ podSandboxId: pod.id }) })).containers, [], 'a refused create leaves no container');
  });

  it('loads stove-default again when it was removed while the daemon runs', async () => {
    await unloadProfile('stove-default');
    assert.equal(await appArmorProfileMode('stove-default'), undefined);
    const { id } = await sleeper({ linux: { securityContext: { apparmor: { profileType: SecurityProfile_ProfileType.RuntimeDefault } } } });
    assert.equal(await appArmorProfileMode('stove-default'), 'enforce');
    assert.equal((await world.exec(id, ['cat', '/proc/self/attr/current'])).stdout.trim(), 'stove-default (enforce)');
  });

  it('has `stove check` report AppArmor and the loaded profile', async () => {
    const r = await execa(join(REPO_ROOT, 'bin/stove'), ['check', '--config', world.daemon.configPath, '--config-dir', world.daemon.configDir], { reject: false });
    assert.match(r.stdout, /^ok +apparmor +enabled; default profile stove-default loaded \(enforce\)/m);
  });
});
