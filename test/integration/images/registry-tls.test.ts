/**
 * Pulling over TLS from registries with a private CA (and one that requires client certificates),
 * with the CA and client pairs dropped into a certs dir while the image service runs.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile, copyFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pushBusyboxImage } from '../../helpers/image-builder.js';
import { openService, type ServiceFixture } from '../../helpers/image-service.js';
import { startRegistry, type TestRegistry } from '../../helpers/registry.js';
import { defaultRegistryConfig } from '../../../src/config/schema.js';
import { testPki, type TestCa, type TestPki } from '../../helpers/pki.js';

describe('images: registries with a private CA and client certificates', function () {
  this.timeout(60_000);
  let pki: TestPki;
  let ca: TestCa;
  let otherCa: TestCa;
  let tlsRegistry: TestRegistry;
  let mtlsRegistry: TestRegistry;
  let certsRoot: string;
  let fx: ServiceFixture;

  before(async () => {
    pki = await testPki();
    ca = await pki.newCa('stove-test-ca');
    otherCa = await pki.newCa('other-ca');
    const server = await ca.server('127.0.0.1');
    tlsRegistry = await startRegistry({ tls: { certFile: server.certFile, keyFile: server.keyFile, ca: ca.cert } });
    const admin = await ca.client('admin');
    mtlsRegistry = await startRegistry({
      tls: { certFile: server.certFile, keyFile: server.keyFile, ca: ca.cert, clientCaFile: ca.certFile, client: admin },
    });
  });
  after(async () => {
    await tlsRegistry?.stop();
    await mtlsRegistry?.stop();
    await pki?.cleanup();
  });
  beforeEach(async () => {
    certsRoot = await mkdtemp(join(tmpdir(), 'stove-certs-'));
    fx = await openService({ certsDirs: [join(certsRoot, 'first'), join(certsRoot, 'second')] });
  });
  afterEach(async () => {
    await fx?.cleanup();
    await rm(certsRoot, { recursive: true, force: true });
  });

  const hostDir = async (root: 'first' | 'second', host: string) => {
    const dir = join(certsRoot, root, host);
    await mkdir(dir, { recursive: true });
    return dir;
  };

  it('names the CA file to add, then pulls once it is there, without a restart', async () => {
    const img = await pushBusyboxImage(tlsRegistry, 'tls/busybox:v1');
    const dir = await hostDir('second', tlsRegistry.host);
    await assert.rejects(fx.images.pull(img.reference), (err: Error) => {
      assert.match(err.message, /x509: certificate signed by unknown authority \(127\.0\.0\.1:\d+\)/);
      assert.ok(err.message.includes(`add its CA as ${join(certsRoot, 'first', tlsRegistry.host, 'ca.crt')}`), err.message);
      return true;
    });
    // A CA from the wrong authority still fails…
    await writeFile(join(dir, 'ca.crt'), otherCa.cert);
    await assert.rejects(fx.images.pull(img.reference), /unknown authority.*CAs from .*ca\.crt/);
    // …the right one is picked up by the next pull.
    await writeFile(join(dir, 'ca.crt'), ca.cert);
    const record = await fx.images.pull(img.reference);
    assert.equal(record.id, img.configDigest);
  });

  it('prefers the first certs dir that has the host, and refuses half a client pair', async () => {
    const img = await pushBusyboxImage(tlsRegistry, 'tls/order:v1', { cmd: ['true'] });
    const second = await hostDir('second', tlsRegistry.host);
    await writeFile(join(second, 'ca.crt'), ca.cert);
    const first = await hostDir('first', tlsRegistry.host);
    await writeFile(join(first, 'ca.crt'), otherCa.cert);
    await assert.rejects(fx.images.pull(img.reference), /unknown authority/);
    await copyFile(ca.certFile, join(first, 'ca.crt'));
    const client = await ca.client('stove');
    await writeFile(join(first, 'client.cert'), client.cert);
    await assert.rejects(fx.images.pull(img.reference), (err: Error) => {
      assert.ok(err.message.includes(`missing key ${join(first, 'client.key')} for client certificate ${join(first, 'client.cert')}`), err.message);
      return true;
    });
    await writeFile(join(first, 'client.key'), client.key);
    assert.equal((await fx.images.pull(img.reference)).id, img.configDigest);
  });

  it('says when a registry demands a client certificate, and uses one added later', async () => {
    const img = await pushBusyboxImage(mtlsRegistry, 'mtls/busybox:v1');
    const dir = await hostDir('first', mtlsRegistry.host);
    await writeFile(join(dir, 'ca.crt'), ca.cert);
    await assert.rejects(fx.images.pull(img.reference), (err: Error) => {
      assert.match(err.message, /requires a client certificate and none is configured/);
      assert.ok(err.message.includes(`${dir}/client.cert and ${dir}/client.key`), err.message);
      return true;
    });
    const stranger = await otherCa.client('stranger');
    await writeFile(join(dir, 'stranger.cert'), stranger.cert);
    await writeFile(join(dir, 'stranger.key'), stranger.key);
    await assert.rejects(fx.images.pull(img.reference), (err: Error) => {
      assert.ok(err.message.includes(`rejected the client certificate ${join(dir, 'stranger.cert')}`), err.message);
      return true;
    });
    await rm(join(dir, 'stranger.cert'));
    await rm(join(dir, 'stranger.key'));
    const client = await ca.client('stove');
    await writeFile(join(dir, 'client.cert'), client.cert);
    await writeFile(join(dir, 'client.key'), client.key);
    assert.equal((await fx.images.pull(img.reference)).id, img.configDigest);
  });

  it("uses a mirror's own certs dir", async () => {
    const img = await pushBusyboxImage(mtlsRegistry, 'library/mirrored:v2', { cmd: ['echo', 'mirror'] });
    fx = await reopenWith(fx, { registries: { 'registry.stove.test': { ...defaultRegistryConfig(), mirrors: [mtlsRegistry.url] } } });
    const dir = await hostDir('first', mtlsRegistry.host);
    await writeFile(join(dir, 'ca.crt'), ca.cert);
    const client = await ca.client('mirror-user');
    await writeFile(join(dir, 'client.cert'), client.cert);
    await writeFile(join(dir, 'client.key'), client.key);
    const record = await fx.images.pull('registry.stove.test/library/mirrored:v2');
    assert.equal(record.id, img.configDigest);
    assert.deepEqual(record.repoTags, ['registry.stove.test/library/mirrored:v2']);
  });

  async function reopenWith(old: ServiceFixture, overrides: Parameters<typeof openService>[0]): Promise<ServiceFixture> {
    await old.cleanup();
    return openService({ certsDirs: [join(certsRoot, 'first'), join(certsRoot, 'second')], ...overrides });
  }
});
