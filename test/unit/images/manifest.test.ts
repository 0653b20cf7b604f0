import assert from 'node:assert/strict';
import { parseManifest, selectPlatform, type IndexManifest } from '../../../src/images/manifest.js';

const d = (c: string) => 'sha256:' + c.repeat(64);
const entry = (c: string, architecture: string, variant?: string, os = 'linux') => ({
  mediaType: 'application/vnd.oci.image.manifest.v1+json',
  digest: d(c),
  size: 100,
  platform: { os, architecture, ...(variant ? { variant } : {}) },
});

describe('manifests and platforms', () => {
  const index: IndexManifest = {
    kind: 'index',
    manifests: [entry('a', 'amd64'), entry('b', 'arm64', 'v8'), entry('c', 'arm', 'v6'), entry('e', 'arm', 'v7'), entry('f', 'unknown', undefined, 'unknown')],
  };

  it('picks the host architecture, variant-aware', () => {
    assert.equal(selectPlatform(index, { os: 'linux', architecture: 'amd64' }, 'x').digest, d('a'));
    assert.equal(selectPlatform(index, { os: 'linux', architecture: 'arm64', variant: 'v8' }, 'x').digest, d('b'));
    assert.equal(selectPlatform(index, { os: 'linux', architecture: 'arm', variant: 'v7' }, 'x').digest, d('e'));
    assert.equal(selectPlatform(index, { os: 'linux', architecture: 'arm', variant: 'v6' }, 'x').digest, d('c'));
  });

  it('lists the platforms present when none matches', () => {
    assert.throws(() => selectPlatform(index, { os: 'linux', architecture: 's390x' }, 'index of "img"'), /no match for platform linux\/s390x in index of "img": it has linux\/amd64, linux\/arm64\/v8, linux\/arm\/v6, linux\/arm\/v7$/);
  });

  it('refuses schema 1 and unknown media types', () => {
    const s1 = Buffer.from(JSON.stringify({ schemaVersion: 1, fsLayers: [] }));
    assert.throws(() => parseManifest(s1, 'application/vnd.docker.distribution.manifest.v1+prettyjws', 'm'), /schema 1/);
    assert.throws(() => parseManifest(Buffer.from('{}'), 'application/x-foo', 'm'), /unsupported manifest media type "application\/x-foo"/);
    assert.throws(() => parseManifest(Buffer.from('not json'), '', 'm'), /not valid JSON/);
  });

  it('parses an OCI manifest and checks its descriptors', () => {
    const body = { schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json', config: { mediaType: 'x', digest: d('1'), size: 2 }, layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar+zstd', digest: d('2'), size: 3 }] };
    const m = parseManifest(Buffer.from(JSON.stringify(body)), '', 'm');
    assert.equal(m.kind, 'image');
    const bad = { ...body, layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar', digest: 'sha256:zz', size: 3 }] };
    assert.throws(() => parseManifest(Buffer.from(JSON.stringify(bad)), '', 'm'), /invalid digest/);
    const foreign = { ...body, layers: [{ mediaType: 'application/x-helm', digest: d('2'), size: 3 }] };
    assert.throws(() => parseManifest(Buffer.from(JSON.stringify(foreign)), '', 'm'), /unsupported media type "application\/x-helm"/);
  });
});
