import assert from 'node:assert/strict';
import { formatReference, parseReference, looksLikeImageId } from '../../../src/images/reference.js';
import { isKind } from '../../../src/common/errors.js';

const D = 'sha256:' + 'a'.repeat(64);

describe('image references', () => {
  const ok: [string, string][] = [
    ['busybox', 'docker.io/library/busybox:latest'],
    ['busybox:1.36', 'docker.io/library/busybox:1.36'],
    ['library/busybox', 'docker.io/library/busybox:latest'],
    ['user/app:v1', 'docker.io/user/app:v1'],
    ['docker.io/busybox', 'docker.io/library/busybox:latest'],
    ['index.docker.io/library/busybox', 'docker.io/library/busybox:latest'],
    ['registry.k8s.io/pause:3.10', 'registry.k8s.io/pause:3.10'],
    ['localhost/app', 'localhost/app:latest'],
    ['localhost:5000/a/b/c:tag', 'localhost:5000/a/b/c:tag'],
    ['127.0.0.1:5000/test/busybox', '127.0.0.1:5000/test/busybox:latest'],
    ['[::1]:5000/x', '[::1]:5000/x:latest'],
    [`busybox@${D}`, `docker.io/library/busybox@${D}`],
    [`busybox:1.0@${D}`, `docker.io/library/busybox:1.0@${D}`],
    ['a.b/c__d-e.f', 'a.b/c__d-e.f:latest'],
    ['Host.Example/x', 'Host.Example/x:latest'],
  ];
  for (const [input, want] of ok) {
    it(`normalises ${input}`, () => assert.equal(formatReference(parseReference(input)), want));
  }

  const bad: [string, RegExp][] = [
    ['', /empty/],
    ['busybox:', /invalid tag ""/],
    ['Busybox', /must be lowercase/],
    ['user/App', /must be lowercase/],
    ['a//b', /invalid repository path component ""/],
    ['-a/b', /invalid repository path component "-a"/],
    ['busybox@sha256:abc', /invalid sha256 digest/],
    ['busybox@md5:' + 'a'.repeat(32), /unsupported digest algorithm "md5"/],
    ['busybox:' + 't'.repeat(129), /invalid tag/],
    ['a'.repeat(64), /64-byte hexadecimal/],
    ['host:port/x', /invalid registry host "host:port"/],
  ];
  for (const [input, message] of bad) {
    it(`rejects ${JSON.stringify(input.slice(0, 40))}`, () =>
      assert.throws(() => parseReference(input), (err: Error) => {
        assert.ok(isKind(err, 'InvalidArgument'));
        assert.match(err.message, message);
        return true;
      }));
  }

  it('accepts sha512 digests', () => {
    const d = 'sha512:' + 'b'.repeat(128);
    assert.equal(parseReference(`x/y@${d}`).digest, d);
  });

  it('recognises image IDs', () => {
    assert.ok(looksLikeImageId('a'.repeat(64)));
    assert.ok(looksLikeImageId(D));
    assert.ok(!looksLikeImageId('busybox'));
  });
});
