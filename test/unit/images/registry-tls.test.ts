/** Certs dir lookups and the messages for TLS failures. */
import assert from 'node:assert/strict';
import { mkdir, rm, writeFile, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import { CertsDirs, type HostTls } from '../../../src/images/trust/certs.js';
import { describeTlsFailure } from '../../../src/images/trust/tls.js';
import { tempDirPerTest } from '../../helpers/temp-dir.js';

const tlsError = (code: string, message = code) => Object.assign(new Error(message), { code });

describe('registry TLS: certs dirs', () => {
  const dir = tempDirPerTest('stove-certs-unit-');

  it('finds nothing for hosts without a dir, or names that are not hosts', async () => {
    const certs = new CertsDirs([join(dir(), 'none'), dir()]);
    assert.equal(await certs.forHost('registry.example'), undefined);
    await mkdir(join(dir(), 'x'));
    for (const host of ['..', '.', 'x/..', '']) assert.equal(await certs.forHost(host), undefined, host);
  });

  it('re-reads a host dir only when a file in it changes', async () => {
    await mkdir(join(dir(), 'r.example'));
    const certs = new CertsDirs([dir()]);
    const empty = await certs.forHost('r.example');
    assert.equal(empty?.ca.length, 0);
    assert.equal(await certs.forHost('r.example'), empty, 'unchanged: the same object');
    await writeFile(join(dir(), 'r.example/ca.crt'), 'no certificate here');
    await assert.rejects(certs.forHost('r.example'), /CA file .*ca\.crt holds no PEM certificate/);
    await writeFile(join(dir(), 'r.example/ca.crt'), '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n');
    await utimes(join(dir(), 'r.example/ca.crt'), new Date(), new Date(Date.now() + 5000));
    await assert.rejects(certs.forHost('r.example'), /not a valid certificate/);
    await rm(join(dir(), 'r.example/ca.crt'));
    await writeFile(join(dir(), 'r.example/client.key'), 'k');
    await assert.rejects(certs.forHost('r.example'), /missing client certificate .*client\.cert for key .*client\.key/);
  });
});

describe('registry TLS: failure messages', () => {
  const certs = new CertsDirs(['/etc/stove/certs.d', '/etc/docker/certs.d']);
  const withClient: HostTls = { dir: '/etc/stove/certs.d/h:1', ca: [], caFiles: [], fingerprint: '', client: { cert: '', key: '', certFile: '/etc/stove/certs.d/h:1/c.cert' } };

  it('names the CA file to add for an unknown authority', () => {
    for (const code of ['UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'SELF_SIGNED_CERT_IN_CHAIN', 'DEPTH_ZERO_SELF_SIGNED_CERT', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY'])
      assert.equal(
        describeTlsFailure(tlsError(code), 'h:1', certs, undefined),
        'x509: certificate signed by unknown authority (h:1); add its CA as /etc/stove/certs.d/h:1/ca.crt',
      );
  });

  it('tells a missing client certificate from a refused one', () => {
    const alert = tlsError('ERR_SSL_SSL/TLS_ALERT_BAD_CERTIFICATE', 'error:0A000412:SSL routines::ssl/tls alert bad certificate');
    assert.equal(
      describeTlsFailure(alert, 'h:1', certs, undefined),
      'h:1 requires a client certificate and none is configured (TLS alert bad certificate); put a pair as /etc/stove/certs.d/h:1/client.cert and /etc/stove/certs.d/h:1/client.key',
    );
    assert.equal(describeTlsFailure(alert, 'h:1', certs, withClient), 'h:1 rejected the client certificate /etc/stove/certs.d/h:1/c.cert (TLS alert bad certificate)');
    assert.match(describeTlsFailure(tlsError('ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED'), 'h:1', certs, undefined)!, /requires a client certificate/);
  });

  it('leaves other errors alone', () => {
    assert.equal(describeTlsFailure(tlsError('ECONNREFUSED'), 'h:1', certs, undefined), undefined);
    assert.match(describeTlsFailure(tlsError('CERT_HAS_EXPIRED'), 'h:1', certs, undefined)!, /has expired or is not yet valid/);
  });
});
