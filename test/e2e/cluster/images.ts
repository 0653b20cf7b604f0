/**
 * Builds the images the single-node cluster runs and pushes them to its registry (up.sh calls this):
 * busybox (two tags with different content, for rollouts), CoreDNS from the binary build.sh made, and a
 * data-only image for image volumes, and two for the kubelet's image GC. Prints `NAME=reference` lines for up.sh's environment file.
 *
 *   node images.js <registry-url> <coredns-binary> <coredns-version>
 */
import { readFileSync } from 'node:fs';
import { pushBusyboxImage, pushImage, type RegistryEndpoint } from '../../helpers/image-builder.js';

const [url, corednsBin, corednsVersion] = process.argv.slice(2);
if (!url || !corednsBin || !corednsVersion) {
  console.error('usage: images.js <registry-url> <coredns-binary> <coredns-version>');
  process.exit(2);
}

const registry: RegistryEndpoint = { host: new URL(url).host, url, dispatcher: undefined, authorization: () => undefined };

const busybox1 = await pushBusyboxImage(registry, 'e2e/busybox:1', { labels: { 'io.stove.e2e': 'busybox' } });
const busybox2 = await pushBusyboxImage(registry, 'e2e/busybox:2', {
  labels: { 'io.stove.e2e': 'busybox' },
  extraFiles: [{ path: 'etc/e2e-release', content: '2\n' }],
});
// For the kubelet's image GC: one image Stove's config pins, one nothing pins; both busybox with a file
// of their own, so each has an ID of its own.
const pinned = await pushBusyboxImage(registry, 'e2e/pinned:1', { extraFiles: [{ path: 'etc/e2e-image', content: 'pinned\n' }] });
const unused = await pushBusyboxImage(registry, 'e2e/unused:1', { extraFiles: [{ path: 'etc/e2e-image', content: 'unused\n' }] });
const coredns = await pushImage(registry, `e2e/coredns:${corednsVersion}`, {
  layers: [
    [
      { type: 'dir', path: 'etc' },
      { path: 'etc/passwd', content: 'root:x:0:0:root:/:/coredns\nnobody:x:65534:65534:nobody:/:/coredns\n' },
      { path: 'coredns', mode: 0o755, content: readFileSync(corednsBin) },
    ],
  ],
  entrypoint: ['/coredns'],
  exposedPorts: ['53/udp', '53/tcp'],
});
// containerd's sandbox image (Stove runs pods from its own rootfs/pause): the same static pause binary.
const pause = await pushImage(registry, 'e2e/pause:3.10', {
  layers: [[{ path: 'pause', mode: 0o755, content: readFileSync(new URL('../../../../rootfs/pause/bin/pause', import.meta.url)) }]],
  entrypoint: ['/pause'],
});
const data = await pushImage(registry, 'e2e/data:1', {
  layers: [
    [
      { type: 'dir', path: 'data' },
      { path: 'data/hello.txt', content: 'hello from an image volume\n' },
      { type: 'dir', path: 'data/sub' },
      { path: 'data/sub/inner.txt', content: 'inner\n' },
    ],
  ],
  cmd: ['/nothing'],
});

console.log(`BUSYBOX_IMAGE=${busybox1.reference}`);
console.log(`BUSYBOX_IMAGE_ID=${busybox1.configDigest}`);
console.log(`BUSYBOX2_IMAGE=${busybox2.reference}`);
console.log(`PINNED_IMAGE=${pinned.reference}`);
console.log(`UNUSED_IMAGE=${unused.reference}`);
console.log(`COREDNS_IMAGE=${coredns.reference}`);
console.log(`PAUSE_IMAGE=${pause.reference}`);
console.log(`DATA_IMAGE=${data.reference}`);
