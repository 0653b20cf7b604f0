/**
 * Signature policies on real pulls: cosign-format signatures made in the test and pushed to a
 * loopback docker-registry, a containers-policy.json(5) file per test, reloaded as it changes.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { hostPlatform, pushBusyboxImage, pushImage, pushIndex, type PushedImage } from '../../helpers/image-builder.js';
import { imageSuite, openService } from '../../helpers/image-service.js';
import { cosignSign, pushSignatures, signPayload, signingKey, simpleSigningPayload, type SigningKey } from '../../helpers/cosign.js';

describe('images: signature policy', function () {
  this.timeout(60_000);
  const env = imageSuite();
  let dir: string;
  let key: SigningKey;
  let otherKey: SigningKey;
  let keyFile: string;

  before(() => {
    key = signingKey('p256');
    otherKey = signingKey('p256');
  });
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stove-policy-'));
    keyFile = join(dir, 'cosign.pub');
    await writeFile(keyFile, key.publicPem);
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** Writes a file by rename, as editors do (a new inode each time). */
  const writePolicy = async (path: string, policy: unknown) => {
    await writeFile(`${path}.tmp`, typeof policy === 'string' ? policy : JSON.stringify(policy));
    await rename(`${path}.tmp`, path);
  };
  const usePolicy = async (policy: unknown, extra: { signaturePolicyDir?: string } = {}) => {
    const file = join(dir, 'policy.json');
    await writePolicy(file, policy);
    await env.fx.cleanup();
    env.fx = await openService({ signaturePolicy: file, ...extra });
    return file;
  };
  const signed = (scopeKey: Record<string, unknown> = { keyPath: keyFile }) => [{ type: 'sigstoreSigned', ...scopeKey }];
  const repoOf = (img: PushedImage) => img.repository.slice(env.registry.host.length + 1);
  /** Nothing of a refused image on disk: no record, no blob, no layer. */
  const assertNothingStored = async () => {
    assert.deepEqual(env.fx.images.list(), []);
    const blobs = await readdir(join(env.fx.dir, 'images/blobs/sha256')).catch(() => []);
    assert.deepEqual(blobs, [], 'no blobs stored');
    const layers = (await readdir(join(env.fx.dir, 'images/layers')).catch(() => [] as string[])).filter((n) => /^[a-f0-9]{64}$/.test(n));
    assert.deepEqual(layers, [], 'no layers unpacked');
  };

  it('pulls an image signed by a policy key, by tag and by digest', async () => {
    const img = await pushBusyboxImage(env.registry, 'sig/good:v1');
    await cosignSign(env.registry, repoOf(img), img.manifestDigest, img.reference, key);
    await usePolicy({ default: [{ type: 'reject' }], transports: { docker: { [`${env.registry.host}/sig`]: signed() } } });
    assert.equal((await env.fx.images.pull(img.reference)).id, img.configDigest);
    // By digest, matchRepoDigestOrExact asks only for the repository.
    assert.equal((await env.fx.images.pull(img.digestReference)).id, img.configDigest);
  });

  it('refuses an unsigned image, leaving nothing on disk', async () => {
    const img = await pushBusyboxImage(env.registry, 'sig/unsigned:v1');
    const file = await usePolicy({ default: signed() });
    await assert.rejects(env.fx.images.pull(img.reference), (err: Error & { kind?: string }) => {
      assert.equal(err.kind, 'FailedPrecondition');
      assert.ok(err.message.startsWith(`failed to pull image "${img.reference}": `), err.message);
      assert.ok(err.message.includes(`refused by signature policy ${file} (scope "default"): no signature for ${img.manifestDigest}`), err.message);
      return true;
    });
    await assertNothingStored();
  });

  it('refuses signatures by another key, for another digest and for another repository', async () => {
    await usePolicy({ default: [{ type: 'insecureAcceptAnything' }], transports: { docker: { [env.registry.host]: signed() } } });

    const other = await pushBusyboxImage(env.registry, 'sig/otherkey:v1');
    await cosignSign(env.registry, repoOf(other), other.manifestDigest, other.reference, otherKey);
    await assert.rejects(env.fx.images.pull(other.reference), /scope "127\.0\.0\.1:\d+"\): signature by an unknown key \(trusted: .*cosign\.pub\)/);

    const a = await pushBusyboxImage(env.registry, 'sig/digest:a', { cmd: ['a'] });
    const b = await pushBusyboxImage(env.registry, 'sig/digest:b', { cmd: ['b'] });
    // A valid signature of b's digest, stored as a's signature.
    const payload = simpleSigningPayload(b.manifestDigest, a.reference);
    await pushSignatures(env.registry, repoOf(a), a.manifestDigest, [{ payload, signature: signPayload(key, payload) }]);
    await assert.rejects(env.fx.images.pull(a.reference), new RegExp(`signature for another digest \\(${b.manifestDigest}\\)`));

    const moved = await pushBusyboxImage(env.registry, 'sig/moved:v1', { cmd: ['moved'] });
    await cosignSign(env.registry, repoOf(moved), moved.manifestDigest, `${env.registry.host}/sig/elsewhere:v1`, key);
    await assert.rejects(env.fx.images.pull(moved.reference), /identity mismatch: signed for ".*\/sig\/elsewhere:v1"/);
    await assert.rejects(env.fx.images.pull(moved.digestReference), /identity mismatch/);

    // A tampered payload does not verify; an attachment that is not a signature does not count.
    const tampered = await pushBusyboxImage(env.registry, 'sig/tampered:v1', { cmd: ['t'] });
    const good = simpleSigningPayload(tampered.manifestDigest, tampered.reference);
    const forged = Buffer.from(good.toString().replace('cosign container', 'cosign  container'));
    await pushSignatures(env.registry, repoOf(tampered), tampered.manifestDigest, [
      { payload: forged, signature: signPayload(key, good) },
      { payload: Buffer.from('{"predicateType":"x"}'), mediaType: 'application/vnd.dsse.envelope.v1+json' },
    ]);
    await assert.rejects(env.fx.images.pull(tampered.reference), /signature by an unknown key/);
    await assertNothingStored();
  });

  it('bounds what it reads for signatures: a signature manifest over 1 MiB is refused', async () => {
    const img = await pushBusyboxImage(env.registry, 'sig/huge:v1', { cmd: ['huge'] });
    const payload = simpleSigningPayload(img.manifestDigest, img.reference);
    // Padding in the annotations of further layers.
    const layers = [{ payload, signature: signPayload(key, payload) }];
    for (let i = 0; i < 40; i++) layers.push({ payload: Buffer.from(`{"pad":${i}}`), signature: 'A'.repeat(30_000) });
    await pushSignatures(env.registry, repoOf(img), img.manifestDigest, layers);
    await usePolicy({ default: signed() });
    await assert.rejects(env.fx.images.pull(img.reference), /reading the signatures of .*: manifest "sha256-[a-f0-9]+\.sig" is larger than 1048576 bytes/);
    await assertNothingStored();
  });

  it('applies the most specific scope: reject, insecureAcceptAnything, wildcard and default', async () => {
    const open = await pushBusyboxImage(env.registry, 'team/open/app:v1', { cmd: ['open'] });
    const closed = await pushBusyboxImage(env.registry, 'team/closed:v1', { cmd: ['closed'] });
    const signedImg = await pushBusyboxImage(env.registry, 'team/signed:v1', { cmd: ['signed'] });
    await cosignSign(env.registry, repoOf(signedImg), signedImg.manifestDigest, signedImg.reference, key);
    await usePolicy({
      default: signed(),
      transports: {
        docker: {
          [`${env.registry.host}/team`]: [{ type: 'reject' }],
          [`${env.registry.host}/team/open`]: [{ type: 'insecureAcceptAnything' }],
          [`${env.registry.host}/team/signed:v1`]: signed(),
          '*.example.com': [{ type: 'insecureAcceptAnything' }],
        },
        'docker-daemon': { '': [{ type: 'insecureAcceptAnything' }] },
      },
    });
    assert.equal((await env.fx.images.pull(open.reference)).id, open.configDigest);
    await assert.rejects(env.fx.images.pull(closed.reference), new RegExp(`scope "${env.registry.host}/team"\\): the policy rejects every image`));
    assert.equal((await env.fx.images.pull(signedImg.reference)).id, signedImg.configDigest);
    // The same image by digest is not in the tag's scope: the namespace's reject applies.
    await assert.rejects(env.fx.images.pull(signedImg.digestReference), /scope ".*\/team"\): the policy rejects/);
  });

  it('verifies ECDSA P-384, RSA and Ed25519 keys given as keyPaths and keyData', async () => {
    const keys = [signingKey('p384'), signingKey('rsa'), signingKey('ed25519')];
    const paths: string[] = [];
    for (const [i, k] of keys.entries()) {
      paths.push(join(dir, `key${i}.pub`));
      await writeFile(paths[i]!, k.publicPem);
    }
    await usePolicy({
      default: [{ type: 'reject' }],
      transports: {
        docker: {
          [`${env.registry.host}/keys/paths`]: signed({ keyPaths: paths }),
          [`${env.registry.host}/keys/data`]: signed({ keyData: Buffer.from(keys[2]!.publicPem).toString('base64') }),
        },
      },
    });
    for (const k of keys) {
      const img = await pushBusyboxImage(env.registry, `keys/paths:${k.kind}`, { cmd: [k.kind] });
      await cosignSign(env.registry, repoOf(img), img.manifestDigest, img.reference, k);
      assert.equal((await env.fx.images.pull(img.reference)).id, img.configDigest, k.kind);
    }
    const inline = await pushBusyboxImage(env.registry, 'keys/data:v1', { cmd: ['inline'] });
    await cosignSign(env.registry, repoOf(inline), inline.manifestDigest, inline.reference, keys[2]!);
    assert.equal((await env.fx.images.pull(inline.reference)).id, inline.configDigest);
    const wrong = await pushBusyboxImage(env.registry, 'keys/data:wrong', { cmd: ['wrong'] });
    await cosignSign(env.registry, repoOf(wrong), wrong.manifestDigest, wrong.reference, keys[0]!);
    await assert.rejects(env.fx.images.pull(wrong.reference), /signature by an unknown key/);
  });

  it('checks signedIdentity rules: remapIdentity, exactRepository, matchRepository', async () => {
    const img = await pushBusyboxImage(env.registry, 'mirror/app:v1', { cmd: ['id'] });
    // Signed under the name it has upstream.
    await cosignSign(env.registry, repoOf(img), img.manifestDigest, 'quay.io/upstream/app:v1', key);
    const host = env.registry.host;
    await usePolicy({
      default: [{ type: 'reject' }],
      transports: {
        docker: {
          [`${host}/mirror/app:v1`]: signed({ keyPath: keyFile, signedIdentity: { type: 'remapIdentity', prefix: `${host}/mirror`, signedPrefix: 'quay.io/upstream' } }),
          [`${host}/mirror/app`]: signed({ keyPath: keyFile, signedIdentity: { type: 'exactRepository', dockerRepository: 'quay.io/upstream/app' } }),
        },
      },
    });
    assert.equal((await env.fx.images.pull(img.reference)).id, img.configDigest);
    assert.equal((await env.fx.images.pull(img.digestReference)).id, img.configDigest);

    await usePolicy({ default: signed({ keyPath: keyFile, signedIdentity: { type: 'matchRepository' } }) });
    await assert.rejects(env.fx.images.pull(img.reference), /identity mismatch: signed for "quay\.io\/upstream\/app:v1", which matchRepository does not accept/);
  });

  it('verifies a multi-platform image by its index digest', async () => {
    const native = await pushBusyboxImage(env.registry, 'multi/signed', { untagged: true, platform: hostPlatform() });
    const foreign = await pushImage(env.registry, 'multi/signed', {
      untagged: true,
      platform: { os: 'linux', architecture: hostPlatform().architecture === 'arm64' ? 'amd64' : 'arm64' },
      layers: [[{ path: 'foreign', content: 'x' }]],
    });
    const index = await pushIndex(env.registry, 'multi/signed:v1', [foreign, native]);
    await usePolicy({ default: signed() });
    // Only the platform manifest signed: not what was pulled.
    await cosignSign(env.registry, 'multi/signed', native.manifestDigest, index.reference, key);
    await assert.rejects(env.fx.images.pull(index.reference), /no signature for sha256:/);
    await cosignSign(env.registry, 'multi/signed', index.indexDigest, index.reference, key);
    assert.equal((await env.fx.images.pull(index.reference)).id, native.configDigest);
  });

  it('uses the pod namespace policy when there is one, else the node policy', async () => {
    const img = await pushBusyboxImage(env.registry, 'ns/app:v1', { cmd: ['ns'] });
    const policyDir = join(dir, 'namespaces');
    await mkdir(policyDir);
    await writePolicy(join(policyDir, 'team-a.json'), { default: [{ type: 'insecureAcceptAnything' }] });
    await usePolicy({ default: [{ type: 'reject' }] }, { signaturePolicyDir: policyDir });
    await assert.rejects(env.fx.images.pull(img.reference), /policy\.json \(scope "default"\): the policy rejects/);
    await assert.rejects(env.fx.images.pull(img.reference, undefined, 'team-b'), /policy\.json \(scope "default"\)/);
    assert.equal((await env.fx.images.pull(img.reference, undefined, 'team-a')).id, img.configDigest);
    // Present now, but the node policy still refuses it to a pull from another namespace.
    await assert.rejects(env.fx.images.pull(img.reference, undefined, 'team-b'), /rejects every image/);
    await assert.rejects(env.fx.images.pull(img.reference, undefined, '../etc'), /invalid pod namespace/);
  });

  it('refuses every pull while the policy does not parse, and follows it as it changes', async () => {
    const img = await pushBusyboxImage(env.registry, 'edit/app:v1', { cmd: ['edit'] });
    const file = await usePolicy('{"default": [{"type": "insecureAcceptAnything"}');
    await assert.rejects(env.fx.images.pull(img.reference), (err: Error & { kind?: string }) => {
      assert.equal(err.kind, 'FailedPrecondition');
      assert.match(err.message, new RegExp(`signature policy ${file} is not valid: not valid JSON.*pulls are refused until it is fixed`));
      return true;
    });
    await writePolicy(file, { default: [{ type: 'signedByAnyone' }] });
    await assert.rejects(env.fx.images.pull(img.reference), /unknown requirement type "signedByAnyone"/);
    await writePolicy(file, { default: [{ type: 'sigstoreSigned', keyPath: keyFile, keyData: 'AAAA' }] });
    await assert.rejects(env.fx.images.pull(img.reference), /exactly one of keyPath, keyPaths, keyData, keyDatas/);
    await assertNothingStored();
    await writePolicy(file, { default: [{ type: 'insecureAcceptAnything' }] });
    assert.equal((await env.fx.images.pull(img.reference)).id, img.configDigest);
    // Tightened while the image is present: a pull by tag is checked again.
    await writePolicy(file, { default: signed() });
    await assert.rejects(env.fx.images.pull(img.reference), /no signature/);
    await rm(file);
    await assert.rejects(env.fx.images.pull(img.reference), /cannot be read.*pulls are refused/);
  });
});
