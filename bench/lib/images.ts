/**
 * The benchmark images, built in-process and pushed to the loopback registry:
 *  - big: ~200 MB in 4 layers of incompressible (random) data, gzip;
 *  - small-files: 30 layers of 300 small text files each, gzip.
 */
import { randomBytes } from 'node:crypto';
import type { TestRegistry } from '../../test/helpers/registry.js';
import { buildLayer, busyboxLayer, pushImage, type LayerEntry, type PushedImage } from '../../test/helpers/image-builder.js';

export async function pushBigImage(registry: TestRegistry, name: string, totalMb = 200, layers = 4): Promise<PushedImage> {
  const perLayer = Math.floor((totalMb * 1024 * 1024) / layers);
  const built = [];
  for (let i = 0; i < layers; i++) {
    const files: LayerEntry[] = [{ type: 'dir', path: `data${i}` }];
    const fileSize = 8 * 1024 * 1024;
    for (let off = 0, n = 0; off < perLayer; off += fileSize, n++)
      files.push({ path: `data${i}/blob-${n}`, content: randomBytes(Math.min(fileSize, perLayer - off)) });
    built.push(buildLayer(files, 'gzip'));
  }
  return pushImage(registry, name, { layers: [busyboxLayer('gzip'), ...built], cmd: ['sh'] });
}

export async function pushSmallFilesImage(registry: TestRegistry, name: string, layers = 30, filesPerLayer = 300): Promise<PushedImage> {
  const built = [];
  for (let i = 0; i < layers; i++) {
    const files: LayerEntry[] = [{ type: 'dir', path: `layer${i}` }];
    for (let d = 0; d < 10; d++) files.push({ type: 'dir', path: `layer${i}/d${d}` });
    for (let f = 0; f < filesPerLayer; f++) {
      const size = 512 + ((f * 7919) % 3500);
      const text = `layer ${i} file ${f} `.repeat(Math.ceil(size / 20)).slice(0, size) + randomBytes(16).toString('hex');
      files.push({ path: `layer${i}/d${f % 10}/file-${f}.txt`, content: text, mode: 0o644 });
    }
    built.push(buildLayer(files, 'gzip'));
  }
  return pushImage(registry, name, { layers: built, cmd: ['sh'] });
}
