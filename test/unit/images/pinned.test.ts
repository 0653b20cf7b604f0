import assert from 'node:assert/strict';
import { PinnedImages } from '../../../src/images/pinned.js';

const image = (...names: string[]) => ({
  repoTags: names.filter((n) => !n.includes('@')),
  repoDigests: names.filter((n) => n.includes('@')),
});

describe('images: pinned patterns', () => {
  it('matches exact references in their normalised spelling', () => {
    const pins = new PinnedImages(['busybox:1.36', 'registry.k8s.io/pause:3.10']);
    assert.equal(pins.matches(image('docker.io/library/busybox:1.36')), true);
    assert.equal(pins.matches(image('registry.k8s.io/pause:3.10')), true);
    assert.equal(pins.matches(image('registry.k8s.io/pause:3.9')), false);
    assert.equal(pins.matches(image('docker.io/library/busybox:1.37')), false);
  });

  it('matches a trailing * as a prefix, also for Docker Hub short names', () => {
    const pins = new PinnedImages(['registry.k8s.io/pause:*', 'nginx*']);
    assert.equal(pins.matches(image('registry.k8s.io/pause:3.10')), true);
    assert.equal(pins.matches(image('registry.k8s.io/pause@sha256:' + 'a'.repeat(64))), false, 'a digest is no tag');
    assert.equal(pins.matches(image('registry.k8s.io/pause-other:1')), false);
    assert.equal(pins.matches(image('docker.io/library/nginx:1.27')), true);
    assert.equal(pins.matches(image('docker.io/library/nginx-unprivileged:1')), true);
    assert.equal(pins.matches(image('docker.io/library/busybox:1')), false);
  });

  it('matches repo digests too, and nothing when no pattern is set', () => {
    const digest = 'registry.k8s.io/pause@sha256:' + 'b'.repeat(64);
    assert.equal(new PinnedImages([digest]).matches(image(digest)), true);
    assert.equal(new PinnedImages([]).matches(image(digest)), false);
  });
});
