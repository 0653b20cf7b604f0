/**
 * AppArmor on a host without it (this kind of machine; the guest's tests cover a host with it): Stove
 * loads nothing, runs every container unconfined as before it had a profile of its own, and refuses a
 * request for a profile it cannot apply as containerd does. Skipped where the host has AppArmor.
 */
import assert from 'node:assert/strict';
import { execa } from 'execa';
import { SecurityProfile_ProfileType } from '../../../src/gen/runtime/v1/api.js';
import { appArmorEnabled } from '../../../src/platform/proc.js';
import { STOVE_BIN } from '../../helpers/stove-process.js';
import { suiteHooks } from '../../helpers/suite.js';
import { ContainerWorld, rejectsWith, skipReason as containerSkipReason } from './world.js';

describe('AppArmor on a host without it (real runc, conmon and CNI)', function () {
  this.timeout(60_000);
  const world = new ContainerWorld();
  let pod: Awaited<ReturnType<ContainerWorld['pod']>>;

  suiteHooks({
    what: 'AppArmor-off tests',
    skipReason: async () => ((await appArmorEnabled()) ? 'this host has AppArmor (test/vm/suite/apparmor.test.ts covers it)' : containerSkipReason()),
    setup: async () => {
      await world.start();
      pod = await world.pod();
    },
    tidy: () => world.removeContainers(),
    leftovers: () => world.containerLeftovers(),
    cleanup: () => world.cleanup(),
  });

  it('runs a container that asks for nothing, or for Unconfined, with no profile in its spec', async () => {
    for (const apparmor of [undefined, { profileType: SecurityProfile_ProfileType.Unconfined }]) {
      const id = await world.run(pod, world.config('sleeper', apparmor ? { linux: { securityContext: { apparmor } } } : {}));
      const info = await world.info(id);
      assert.equal(info.runtimeSpec.process.apparmorProfile, undefined);
      assert.equal((await world.exec(id, ['echo', 'ok'])).stdout, 'ok\n');
    }
    assert.doesNotMatch(world.daemon.output(), /AppArmor: (loaded|the default profile)/, 'the daemon loads no profile here');
    assert.match(world.daemon.output(), /"apparmor":false/);
  });

  it('refuses RuntimeDefault and Localhost with FAILED_PRECONDITION, as containerd, leaving nothing', async () => {
    const asks = [
      { apparmor: { profileType: SecurityProfile_ProfileType.RuntimeDefault } },
      { apparmor: { profileType: SecurityProfile_ProfileType.Localhost, localhostRef: 'localhost/my-profile' } },
      { apparmorProfile: 'runtime/default' },
    ];
    for (const securityContext of asks) {
      await rejectsWith(world.create(pod, world.config('sleeper', { linux: { securityContext } })), 'FAILED_PRECONDITION', /apparmor is not supported: AppArmor is not enabled on this host/);
    }
    assert.deepEqual((await world.daemon.clients.runtime.listContainers({ filter: undefined })).containers, []);
  });

  it('has `stove check` say AppArmor is not enabled', async () => {
    const r = await execa(STOVE_BIN, ['check', '--config', world.daemon.configPath, '--config-dir', world.daemon.configDir], { reject: false });
    assert.match(r.stdout, /^ok +apparmor +not enabled on this host: containers run unconfined/m);
  });
});
