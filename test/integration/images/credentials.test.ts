/**
 * Registry credentials (AuthConfig's debug_redact fields, and registry passwords in the configuration)
 * never appear in the daemon's log at debug level, in error messages or in verbose output, whether
 * the pull works or the registry refuses them.
 */
import assert from 'node:assert/strict';
import type { ServiceError } from '@grpc/grpc-js';
import { AuthConfig, PullImageRequest } from '../../../src/gen/runtime/v1/api.js';
import { startRegistry, type TestRegistry } from '../../helpers/registry.js';
import { pushBusyboxImage } from '../../helpers/image-builder.js';
import { startStove, type StoveProcess } from '../../helpers/stove-process.js';
import { suiteHooks } from '../../helpers/suite.js';
import { skipReason } from '../container/world.js';

const USER = 'stove-user';
const PASSWORD = 'S3cret-pw-q7x';
const SECRETS = [PASSWORD, 'Wr0ng-pw-z9k', 'idtok-secret-4j2', 'regtok-secret-8m1', 'cfg-secret-2p5', 'cfgtok-secret-6v3'];
/** Every form a secret could leak in: as is, and inside base64 `user:secret`. */
const FORMS = SECRETS.flatMap((s) => [s, Buffer.from(`${USER}:${s}`).toString('base64')]);

describe('images: credentials stay secret (real daemon and registry)', function () {
  this.timeout(60_000);
  let registry: TestRegistry;
  let daemon: StoveProcess;
  let image: string;

  suiteHooks({
    what: 'credential tests',
    skipReason,
    setup: async () => {
      registry = await startRegistry({ auth: { username: USER, password: PASSWORD } });
      image = (await pushBusyboxImage(registry, 'secret/busybox:1')).reference;
      daemon = await startStove({
        configToml: ['[registries."other.example:5000"]', 'password = "cfg-secret-2p5"', 'username = "cfg"', '[registries."third.example"]', 'identity_token = "cfgtok-secret-6v3"', ''].join('\n'),
      });
    },
    cleanup: async () => {
      await daemon?.stop();
      await daemon?.cleanup();
      await registry?.stop();
    },
  });

  const pull = (auth: Partial<AuthConfig>) => daemon.clients.image.pullImage(PullImageRequest.fromPartial({ image: { image }, auth }));
  const assertClean = (text: string, where: string) => {
    for (const f of FORMS) assert.ok(!text.includes(f), `${where} contains a credential (${f.slice(0, 3)}…)`);
  };

  it('keeps AuthConfig secrets and configured passwords out of logs, errors and verbose output', async () => {
    const errors: string[] = [];
    const refused = async (auth: Partial<AuthConfig>) => {
      await assert.rejects(pull(auth), (err: ServiceError) => (errors.push(err.details), true), 'the pull should have been refused');
    };
    await refused({ username: USER, password: 'Wr0ng-pw-z9k' });
    await refused({ auth: Buffer.from(`${USER}:Wr0ng-pw-z9k`).toString('base64') });
    await refused({ identityToken: 'idtok-secret-4j2' });
    await refused({ registryToken: 'regtok-secret-8m1' });
    await refused({ username: USER, password: 'Wr0ng-pw-z9k', identityToken: 'idtok-secret-4j2', registryToken: 'regtok-secret-8m1' });
    for (const e of errors) {
      assert.match(e, /secret\/busybox/, 'the error names the image');
      assertClean(e, `error "${e}"`);
    }
    assert.ok((await pull({ username: USER, password: PASSWORD })).imageRef.startsWith('sha256:'));
    assert.ok((await pull({ auth: Buffer.from(`${USER}:${PASSWORD}`).toString('base64') })).imageRef.startsWith('sha256:'));

    const status = await daemon.clients.runtime.status({ verbose: true });
    assert.match(status.info.config!, /<redacted>/);
    assertClean(JSON.stringify(status.info), 'verbose Status');
    const imageStatus = await daemon.clients.image.imageStatus({ image: { image, annotations: {}, userSpecifiedImage: '', runtimeHandler: '', imageRef: '' }, verbose: true });
    assertClean(JSON.stringify(imageStatus.info), 'verbose ImageStatus');
    assert.match(daemon.output(), /"level":"debug","msg":"rpc".*"rpc":"PullImage"/, 'the daemon logged the calls at debug level');
    assertClean(daemon.output(), 'the daemon log');
  });
});
