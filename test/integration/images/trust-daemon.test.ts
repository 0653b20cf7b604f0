/**
 * Registry trust through a running `stove serve`: a registry over TLS that requires client
 * certificates, its CA and client pair dropped into the configured certs dir while the daemon runs,
 * PullImage refused and accepted by the signature policy (per pod namespace from the sandbox
 * config), and the policy file switched by a config reload.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PullImageRequest } from '../../../src/gen/runtime/v1/api.js';
import { pushBusyboxImage } from '../../helpers/image-builder.js';
import { startRegistry, type TestRegistry } from '../../helpers/registry.js';
import { startStove, type StoveProcess } from '../../helpers/stove-process.js';
import { testPki, type TestCa, type TestPki } from '../../helpers/pki.js';
import { cosignSign, signingKey } from '../../helpers/cosign.js';
import { eventually, rejectsWith } from '../sandbox/world.js';

const pull = (image: string, namespace?: string) =>
  PullImageRequest.fromPartial({ image: { image }, ...(namespace ? { sandboxConfig: { metadata: { name: 'p', uid: 'u', namespace, attempt: 0 } } } : {}) });

describe('images: certs dirs and signature policy in the daemon', function () {
  this.timeout(60_000);
  let pki: TestPki;
  let registry: TestRegistry;
  let stove: StoveProcess;
  let dir: string;
  let ca: TestCa;

  before(async () => {
    pki = await testPki();
    ca = await pki.newCa('daemon-ca');
    const server = await ca.server('127.0.0.1');
    registry = await startRegistry({
      tls: { certFile: server.certFile, keyFile: server.keyFile, ca: ca.cert, clientCaFile: ca.certFile, client: await ca.client('pusher') },
    });
    dir = await mkdtemp(join(tmpdir(), 'stove-trust-'));
  });
  after(async () => {
    await stove?.stop();
    await stove?.cleanup();
    await registry?.stop();
    await pki?.cleanup();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('pulls from a private CA with a client certificate, as allowed by the policy', async () => {
    const key = signingKey('p256');
    await writeFile(join(dir, 'cosign.pub'), key.publicPem);
    const signedImg = await pushBusyboxImage(registry, 'signed/app:v1');
    await cosignSign(registry, 'signed/app', signedImg.manifestDigest, signedImg.reference, key);
    const unsigned = await pushBusyboxImage(registry, 'signed/other:v1', { cmd: ['other'] });
    const certs = join(dir, 'certs.d');
    await mkdir(join(certs, registry.host), { recursive: true });
    await mkdir(join(dir, 'namespaces'));
    await writeFile(join(dir, 'namespaces/dev.json'), JSON.stringify({ default: [{ type: 'insecureAcceptAnything' }] }));
    const policy = {
      default: [{ type: 'reject' }],
      transports: { docker: { [`${registry.host}/signed`]: [{ type: 'sigstoreSigned', keyPath: join(dir, 'cosign.pub') }] } },
    };
    await writeFile(join(dir, 'policy.json'), JSON.stringify(policy));
    stove = await startStove({
      configToml: [
        '[images]',
        `certs_dirs = ${JSON.stringify([certs])}`,
        `signature_policy = ${JSON.stringify(join(dir, 'policy.json'))}`,
        `signature_policy_dir = ${JSON.stringify(join(dir, 'namespaces'))}`,
      ].join('\n'),
    });
    const image = stove.clients.image;

    await rejectsWith(image.pullImage(pull(signedImg.reference)), 'FAILED_PRECONDITION', /x509: certificate signed by unknown authority .*add its CA as .*certs\.d\/127\.0\.0\.1:\d+\/ca\.crt/);
    await writeFile(join(certs, registry.host, 'ca.crt'), ca.cert);
    await rejectsWith(image.pullImage(pull(signedImg.reference)), 'FAILED_PRECONDITION', /requires a client certificate and none is configured/);
    const client = await ca.client('node');
    await writeFile(join(certs, registry.host, 'node.cert'), client.cert);
    await writeFile(join(certs, registry.host, 'node.key'), client.key);
    assert.equal((await image.pullImage(pull(signedImg.reference))).imageRef, signedImg.configDigest);
    assert.match(stove.output(), /image signature verified.*cosign\.pub/);

    await rejectsWith(
      image.pullImage(pull(unsigned.reference)),
      'FAILED_PRECONDITION',
      new RegExp(`failed to pull image "${unsigned.reference}": .* refused by signature policy .*policy\\.json \\(scope "${registry.host}/signed"\\): no signature`),
    );
    // The pod's namespace has its own policy; another namespace falls back to the node's.
    assert.equal((await image.pullImage(pull(unsigned.reference, 'dev'))).imageRef, unsigned.configDigest);
    await rejectsWith(image.pullImage(pull(unsigned.reference, 'prod')), 'FAILED_PRECONDITION', /no signature/);

    // A reload pointing at another policy file applies to the next pull.
    await writeFile(join(dir, 'open.json'), JSON.stringify({ default: [{ type: 'insecureAcceptAnything' }] }));
    await writeFile(join(stove.configDir, '50-trust.toml'), `[images]\nsignature_policy = ${JSON.stringify(join(dir, 'open.json'))}\n`);
    const before = stove.output().length;
    stove.child.kill('SIGHUP');
    await eventually('the reload', async () => /configuration reloaded.*images\.signature_policy/.test(stove.output().slice(before)), 10_000);
    assert.equal((await image.pullImage(pull(unsigned.reference, 'prod'))).imageRef, unsigned.configDigest);
  });
});
