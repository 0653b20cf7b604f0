/** containers-policy.json(5) parsing, scope lookup, signedIdentity rules and cosign payloads. */
import assert from 'node:assert/strict';
import { generateKeyPairSync, sign } from 'node:crypto';
import { parseReference } from '../../../src/images/reference.js';
import { PolicyFormatError, parsePolicy, requirementsFor, scopesFor } from '../../../src/images/trust/policy.js';
import { identityMatches, type SignedIdentityRule } from '../../../src/images/trust/identity.js';
import { fetchSignatures, loadPublicKey, parsePayload, signatureTag, signingKey, type SignatureSource } from '../../../src/images/trust/cosign.js';
import { notFound } from '../../../src/common/errors.js';
import { createHash } from 'node:crypto';
import { duplicateKey } from '../../../src/common/json.js';

const accept = [{ type: 'insecureAcceptAnything' }];
const reject = [{ type: 'reject' }];

describe('signature policy: parsing', () => {
  it('reads default and docker scopes, and checks other transports only for form', () => {
    const policy = parsePolicy(
      JSON.stringify({ default: reject, transports: { docker: { 'example.com': accept }, 'docker-daemon': { '': accept }, atomic: {} } }),
    );
    assert.equal(policy.default[0]!.type, 'reject');
    assert.deepEqual([...policy.docker.keys()], ['example.com']);
  });

  const bad: [string, unknown, RegExp][] = [
    ['not JSON', '{', /not valid JSON/],
    ['no default', { transports: {} }, /"default" is missing/],
    ['an unknown top-level key', { default: accept, extra: 1 }, /unknown key "extra"/],
    ['an empty requirement list', { default: [] }, /non-empty list/],
    ['an unknown requirement type', { default: [{ type: 'acceptIfFriendly' }] }, /unknown requirement type "acceptIfFriendly"/],
    ['a requirement without a type', { default: [{}] }, /unknown requirement type undefined/],
    ['an extra key on reject', { default: [{ type: 'reject', keyPath: '/k' }] }, /unknown key "keyPath"/],
    ['GPG signedBy', { default: [{ type: 'signedBy', keyType: 'GPGKeys', keyPath: '/k' }] }, /not supported by Stove; use "sigstoreSigned"/],
    ['sigstoreSigned without a key', { default: [{ type: 'sigstoreSigned' }] }, /exactly one of keyPath/],
    ['sigstoreSigned with two key sources', { default: [{ type: 'sigstoreSigned', keyPath: '/a', keyPaths: ['/b'] }] }, /got keyPath and keyPaths/],
    ['keyless fulcio', { default: [{ type: 'sigstoreSigned', fulcio: {}, rekorPublicKeyPath: '/r' }] }, /"fulcio" .* not supported/],
    ['a relative keyPath', { default: [{ type: 'sigstoreSigned', keyPath: 'cosign.pub' }] }, /must be an absolute path/],
    ['keyData that is not base64', { default: [{ type: 'sigstoreSigned', keyData: 'not base64!' }] }, /must be base64/],
    ['an unknown signedIdentity', { default: [{ type: 'sigstoreSigned', keyPath: '/k', signedIdentity: { type: 'matchAnything' } }] }, /unknown signedIdentity type/],
    ['exactReference without a tag', { default: [{ type: 'sigstoreSigned', keyPath: '/k', signedIdentity: { type: 'exactReference', dockerReference: 'quay.io/a/b' } }] }, /with a tag or digest/],
    ['a wildcard with a path', { default: accept, transports: { docker: { '*.example.com/ns': accept } } }, /wildcard scope/],
    ['a key given twice', '{"default": [{"type": "reject"}], "default": [{"type": "insecureAcceptAnything"}]}', /key "default" appears twice/],
    ['a bad requirement under another transport', { default: accept, transports: { atomic: { '': [{ type: 'nope' }] } } }, /unknown requirement type "nope"/],
  ];
  for (const [what, doc, message] of bad) {
    it(`refuses ${what}`, () => {
      assert.throws(() => parsePolicy(typeof doc === 'string' ? doc : JSON.stringify(doc)), (err: Error) => err instanceof PolicyFormatError && message.test(err.message));
    });
  }
});

describe('duplicate JSON keys', () => {
  it('finds a key given twice in one object, at any depth, escapes decoded', () => {
    assert.equal(duplicateKey('{"a": 1, "b": {"a": 2}, "c": [{"a": 1}, {"a": 2}]}'), undefined);
    assert.equal(duplicateKey('{"a": 1, "b": 2, "a": 3}'), 'a');
    assert.equal(duplicateKey('[{"x": {"k": "\\"", "k": 1}}]'), 'k');
    assert.equal(duplicateKey('{"\\u0061": 1, "a": 2}'), 'a');
    assert.equal(duplicateKey('{"a": ["a", "a"], "b": "a,\\"a"}'), undefined);
  });
});

describe('signature policy: scopes', () => {
  it('lists scopes most specific first, wildcards without the port', () => {
    assert.deepEqual(scopesFor(parseReference('registry.corp.example.com:5000/team/app/web:v1')), [
      'registry.corp.example.com:5000/team/app/web:v1',
      'registry.corp.example.com:5000/team/app/web',
      'registry.corp.example.com:5000/team/app',
      'registry.corp.example.com:5000/team',
      'registry.corp.example.com:5000',
      '*.corp.example.com',
      '*.example.com',
      '*.com',
    ]);
    const digest = 'sha256:' + 'a'.repeat(64);
    assert.equal(scopesFor(parseReference(`busybox@${digest}`))[0], `docker.io/library/busybox@${digest}`);
  });

  it('picks the most specific scope present, then "", then default', () => {
    const policy = parsePolicy(
      JSON.stringify({
        default: reject,
        transports: { docker: { '*.example.com': accept, 'a.example.com/team': reject, 'a.example.com/team/app:v1': accept } },
      }),
    );
    assert.equal(requirementsFor(policy, parseReference('a.example.com/team/app:v1')).scope, 'a.example.com/team/app:v1');
    assert.equal(requirementsFor(policy, parseReference('a.example.com/team/app:v2')).scope, 'a.example.com/team');
    assert.equal(requirementsFor(policy, parseReference('b.example.com/x')).scope, '*.example.com');
    assert.equal(requirementsFor(policy, parseReference('quay.io/x')).scope, 'default');
    const withEmpty = parsePolicy(JSON.stringify({ default: reject, transports: { docker: { '': accept } } }));
    assert.equal(requirementsFor(withEmpty, parseReference('quay.io/x')).scope, 'transports.docker ""');
  });
});

describe('signature policy: signedIdentity', () => {
  const digest = 'sha256:' + 'b'.repeat(64);
  const cases: [SignedIdentityRule, string, string, boolean][] = [
    [{ type: 'matchRepoDigestOrExact' }, 'quay.io/a/b:v1', 'quay.io/a/b:v1', true],
    [{ type: 'matchRepoDigestOrExact' }, 'quay.io/a/b:v1', 'quay.io/a/b:v2', false],
    [{ type: 'matchRepoDigestOrExact' }, 'quay.io/a/b:v1', 'quay.io/a/b', false],
    [{ type: 'matchRepoDigestOrExact' }, `quay.io/a/b@${digest}`, 'quay.io/a/b:whatever', true],
    [{ type: 'matchRepoDigestOrExact' }, `quay.io/a/b@${digest}`, 'quay.io/a/c:v1', false],
    [{ type: 'matchRepoDigestOrExact' }, 'busybox', 'docker.io/library/busybox:latest', true],
    [{ type: 'matchExact' }, `quay.io/a/b@${digest}`, 'quay.io/a/b:v1', false],
    [{ type: 'matchExact' }, `quay.io/a/b@${digest}`, `quay.io/a/b@${digest}`, true],
    [{ type: 'matchRepository' }, 'quay.io/a/b:v1', 'quay.io/a/b:v9', true],
    [{ type: 'matchRepository' }, 'quay.io/a/b:v1', 'quay.io/a/b', true],
    [{ type: 'matchRepository' }, 'quay.io/a/b:v1', 'quay.io/a/bc:v1', false],
    [{ type: 'exactReference', dockerReference: 'quay.io/x/y:1' }, 'mirror.local/a:v1', 'quay.io/x/y:1', true],
    [{ type: 'exactReference', dockerReference: 'quay.io/x/y:1' }, 'mirror.local/a:v1', 'quay.io/x/y:2', false],
    [{ type: 'exactRepository', dockerRepository: 'quay.io/x/y' }, 'mirror.local/a:v1', 'quay.io/x/y:2', true],
    [{ type: 'exactRepository', dockerRepository: 'quay.io/x/y' }, 'mirror.local/a:v1', 'quay.io/x/z:2', false],
    [{ type: 'remapIdentity', prefix: 'mirror.local/ns', signedPrefix: 'quay.io/up' }, 'mirror.local/ns/app:v1', 'quay.io/up/app:v1', true],
    [{ type: 'remapIdentity', prefix: 'mirror.local/ns', signedPrefix: 'quay.io/up' }, 'mirror.local/ns/app:v1', 'quay.io/up/app:v2', false],
    [{ type: 'remapIdentity', prefix: 'mirror.local/ns', signedPrefix: 'quay.io/up' }, 'mirror.local/nsx/app:v1', 'quay.io/upx/app:v1', false],
    [{ type: 'remapIdentity', prefix: 'mirror.local/ns', signedPrefix: 'quay.io/up' }, 'mirror.local/other:v1', 'mirror.local/other:v1', true],
    [{ type: 'matchRepoDigestOrExact' }, 'quay.io/a/b:v1', 'not a reference', false],
  ];
  for (const [rule, pulled, signed, expected] of cases) {
    it(`${rule.type}: pulled ${pulled}, signed ${signed} → ${expected ? 'accept' : 'refuse'}`, () => {
      assert.equal(identityMatches(rule, parseReference(pulled), signed), expected);
    });
  }
});

describe('cosign signatures', () => {
  const digest = 'sha256:' + 'c'.repeat(64);
  const payload = (critical: unknown, optional: unknown = null) => Buffer.from(JSON.stringify({ critical, optional }));
  const critical = { identity: { 'docker-reference': 'quay.io/a/b:v1' }, image: { 'docker-manifest-digest': digest }, type: 'cosign container image signature' };

  it('names the signature tag after the digest', () => {
    assert.equal(signatureTag(digest), `sha256-${'c'.repeat(64)}.sig`);
  });

  it('parses a payload strictly', () => {
    assert.deepEqual(parsePayload(payload(critical, { creator: 'cosign', timestamp: 1700000000 })), {
      dockerManifestDigest: digest,
      dockerReference: 'quay.io/a/b:v1',
    });
    assert.throws(() => parsePayload(payload({ ...critical, extra: 1 })), /unknown field "extra"/);
    assert.throws(() => parsePayload(payload({ ...critical, type: 'atomic container signature' })), /unrecognised signature type/);
    assert.throws(() => parsePayload(payload(critical, { timestamp: 1.5 })), /timestamp is not an integer/);
    assert.throws(() => parsePayload(Buffer.from(JSON.stringify({ critical }))), /missing "optional"/);
    const twice = payload(critical).toString().replace('"optional"', '"critical":{},"optional"');
    assert.throws(() => parsePayload(Buffer.from(twice)), /key "critical" appears twice/);
    assert.throws(() => parsePayload(payload({ ...critical, image: { 'docker-manifest-digest': 'sha256:short' } })), /invalid docker-manifest-digest/);
  });

  it('verifies with the right key only, and refuses keys cosign does not make', () => {
    const pair = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const other = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const pem = (k: typeof pair) => k.publicKey.export({ type: 'spki', format: 'pem' }).toString();
    const body = payload(critical);
    const sig = sign('sha256', body, pair.privateKey).toString('base64');
    const key = loadPublicKey(pem(pair), 'good');
    assert.equal(signingKey({ payload: body, base64Signature: sig }, [loadPublicKey(pem(other), 'other'), key])?.label, 'good');
    assert.equal(signingKey({ payload: body, base64Signature: sig }, [loadPublicKey(pem(other), 'other')]), undefined);
    assert.equal(signingKey({ payload: Buffer.concat([body, Buffer.from(' ')]), base64Signature: sig }, [key]), undefined);
    assert.equal(signingKey({ payload: body, base64Signature: ` ${sig}` }, [key]), undefined);
    const dsa = generateKeyPairSync('ec', { namedCurve: 'secp256k1' });
    assert.throws(() => loadPublicKey(pem(dsa), 'k1'), /cosign keys are/);
    assert.throws(() => loadPublicKey('not a key', 'junk'), /not a PEM public key/);
  });

  it('bounds what it reads from the registry and checks payload digests', async () => {
    const body = payload(critical);
    const hash = 'sha256:' + createHash('sha256').update(body).digest('hex');
    const manifest = (layers: unknown[]) => Buffer.from(JSON.stringify({ schemaVersion: 2, layers }));
    const source = (m: Buffer, blob: Buffer = body): SignatureSource & { asked: number[] } => {
      const asked: number[] = [];
      return {
        asked,
        getManifest: async (_ref, max) => {
          asked.push(max);
          return { body: m };
        },
        getBlob: async (_d, max) => {
          asked.push(max);
          return blob;
        },
      };
    };
    const layer = { mediaType: 'application/vnd.dev.cosign.simplesigning.v1+json', digest: hash, size: body.length, annotations: { 'dev.cosignproject.cosign/signature': 'AAAA' } };
    const ok = source(manifest([layer, { mediaType: 'application/vnd.dsse.envelope.v1+json', digest: hash, size: 1 }]));
    const got = await fetchSignatures(ok, digest);
    assert.equal(got.signatures.length, 1);
    assert.equal(got.otherAttachments, 1);
    assert.deepEqual(ok.asked, [1 << 20, body.length]);
    await assert.rejects(fetchSignatures(source(manifest([{ ...layer, size: 10 << 20 }])), digest), /may be at most/);
    await assert.rejects(fetchSignatures(source(manifest(Array(65).fill(layer))), digest), /more than the 64/);
    await assert.rejects(fetchSignatures(source(manifest([layer]), Buffer.from('x'.repeat(body.length))), digest), /does not match its digest/);
    const none: SignatureSource = { getManifest: () => Promise.reject(notFound('no such tag')), getBlob: () => Promise.reject(new Error('unused')) };
    assert.deepEqual(await fetchSignatures(none, digest), { signatures: [], otherAttachments: 0 });
  });
});
