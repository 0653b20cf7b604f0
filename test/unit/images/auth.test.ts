import assert from 'node:assert/strict';
import { parseWwwAuthenticate, credentialsFromAuthConfig, TokenCache, errorSummary } from '../../../src/images/auth.js';

describe('registry auth', () => {
  it('parses a bearer challenge', () => {
    const [c] = parseWwwAuthenticate('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull"');
    assert.equal(c!.scheme, 'bearer');
    assert.deepEqual(c!.params, { realm: 'https://auth.docker.io/token', service: 'registry.docker.io', scope: 'repository:library/busybox:pull' });
  });

  it('parses several challenges, unquoted values and escapes', () => {
    const cs = parseWwwAuthenticate('Basic realm="a \\"b\\"", Bearer realm=https://x/token, service=svc');
    assert.deepEqual(cs.map((c) => c.scheme), ['basic', 'bearer']);
    assert.equal(cs[0]!.params.realm, 'a "b"');
    assert.deepEqual(cs[1]!.params, { realm: 'https://x/token', service: 'svc' });
  });

  it('reads CRI AuthConfig credentials in every form', () => {
    assert.deepEqual(credentialsFromAuthConfig({ username: 'u', password: 'p' }), { username: 'u', password: 'p' });
    assert.deepEqual(credentialsFromAuthConfig({ auth: Buffer.from('u:p:q').toString('base64') }), { username: 'u', password: 'p:q' });
    assert.deepEqual(credentialsFromAuthConfig({ identityToken: 'id' }), { identityToken: 'id' });
    assert.deepEqual(credentialsFromAuthConfig({ registryToken: 'rt' }), { registryToken: 'rt' });
    assert.equal(credentialsFromAuthConfig({ username: '', password: '', auth: '' }), undefined);
    assert.throws(() => credentialsFromAuthConfig({ auth: Buffer.from('nocolon').toString('base64') }), /base64 of "username:password"/);
  });

  it('keeps tokens until shortly before they expire', () => {
    let now = 1_000_000;
    const cache = new TokenCache(() => now);
    cache.set('k', 't', 300);
    assert.equal(cache.get('k'), 't');
    now += 269_000;
    assert.equal(cache.get('k'), 't');
    now += 2_000;
    assert.equal(cache.get('k'), undefined);
  });

  it('summarises registry error bodies', () => {
    assert.equal(errorSummary('{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}'), ': MANIFEST_UNKNOWN: manifest unknown');
    assert.equal(errorSummary(''), '');
  });
});
