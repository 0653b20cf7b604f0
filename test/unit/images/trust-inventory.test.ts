/** What `stove check` says about certs dirs and signature policy files. */
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { checkRegistryTrust } from '../../../src/check/doctor.js';
import { defaultConfig } from '../../../src/config/schema.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

describe('stove check: registry trust', () => {
  const dir = tempDirPerTest('stove-trust-check-');

  const config = (images: Partial<ReturnType<typeof defaultConfig>['images']>) => {
    const c = defaultConfig();
    Object.assign(c.images, { certsDirs: [join(dir(), 'a'), join(dir(), 'b')], ...images });
    return c;
  };

  it('is ok with no files, and says every image is accepted', async () => {
    const result = await checkRegistryTrust(config({}));
    assert.equal(result.status, 'ok');
    assert.match(result.detail, /0 registry host dir\(s\).*0 signature policy file\(s\)/);
    assert.deepEqual(result.lines, ['policy   none: every image is accepted (images.signature_policy is empty)']);
  });

  it('lists host dirs and policies, and fails on files that make pulls fail', async () => {
    await mkdir(join(dir(), 'a/registry.example:5443'), { recursive: true });
    await mkdir(join(dir(), 'b/registry.example:5443'), { recursive: true });
    await mkdir(join(dir(), 'b/half.example'), { recursive: true });
    await writeFile(join(dir(), 'b/half.example/client.cert'), 'x');
    const pem = generateKeyPairSync('ed25519').publicKey.export({ type: 'spki', format: 'pem' }).toString();
    await writeFile(join(dir(), 'key.pub'), pem);
    await writeFile(
      join(dir(), 'policy.json'),
      JSON.stringify({ default: [{ type: 'reject' }], transports: { docker: { 'quay.io': [{ type: 'sigstoreSigned', keyPaths: [join(dir(), 'key.pub'), join(dir(), 'gone.pub')] }] } } }),
    );
    await mkdir(join(dir(), 'ns'));
    await writeFile(join(dir(), 'ns/team-a.json'), '{"default": [{"type": "insecureAcceptAnything"}]}');
    await writeFile(join(dir(), 'ns/team-b.json'), '{"default": [{"type": "whatever"}]}');
    const result = await checkRegistryTrust(config({ signaturePolicy: join(dir(), 'policy.json'), signaturePolicyDir: join(dir(), 'ns') }));
    assert.equal(result.status, 'fail');
    assert.match(result.detail, /2 registry host dir\(s\).*3 signature policy file\(s\), 3 problem\(s\)/);
    assert.deepEqual(result.lines, [
      `certs    ${join(dir(), 'a/registry.example:5443')}: 0 CA certificate(s)`,
      `certs    ${join(dir(), 'b/registry.example:5443')}: shadowed by an earlier certs dir`,
      `policy   ${join(dir(), 'policy.json')}: default reject, 1 docker scope(s)`,
      `policy   ${join(dir(), 'ns/team-a.json')}: default insecureAcceptAnything, 0 docker scope(s)`,
      `problem  ${join(dir(), 'b/half.example')}: missing key ${join(dir(), 'b/half.example/client.key')} for client certificate ${join(dir(), 'b/half.example/client.cert')}; CA certificates must use the extension .crt`,
      `problem  ${join(dir(), 'policy.json')}: public key ${join(dir(), 'gone.pub')} named by the signature policy cannot be read: ENOENT: no such file or directory, stat '${join(dir(), 'gone.pub')}'`,
      `problem  ${join(dir(), 'ns/team-b.json')}: "default"[0]: unknown requirement type "whatever" (every pull it governs is refused)`,
    ]);
  });
});
