/** ImageService works with the parts it is given (daemon.ts builds them): a test can fake the registry. */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isKind, notFound } from '../../../src/common/errors.js';
import { silentLogger } from '../../../src/common/logger.js';
import { ImageService, imageParts, type ImageServiceOptions } from '../../../src/images/image-service.js';
import type { RegistryClient } from '../../../src/images/registry-client.js';

describe('ImageService parts', () => {
  let dir: string;
  let images: ImageService | undefined;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stove-image-parts-'));
  });
  afterEach(async () => {
    await images?.close();
    images = undefined;
    await rm(dir, { recursive: true, force: true });
  });

  it('pulls through the registry client it was given', async () => {
    const options: ImageServiceOptions = {
      imagesDir: join(dir, 'images'),
      stateDir: join(dir, 'state'),
      containerDir: (id) => join(dir, 'containers', id),
      maxConcurrentDownloads: 1,
      stallTimeoutSeconds: 5,
      registries: {},
      syncBlobs: false,
      log: silentLogger,
    };
    const asked: string[] = [];
    const fake = new Proxy({} as RegistryClient, {
      get: (_target, name) => (...args: unknown[]) => {
        if (name === 'close') return Promise.resolve();
        asked.push(`${String(name)} ${JSON.stringify(args[0])}`);
        return Promise.reject(notFound('manifest unknown to the fake registry'));
      },
    });
    images = await ImageService.open(options, { ...imageParts(options), client: fake });
    await assert.rejects(images.pull('registry.invalid/team/app:1'), (err: unknown) => isKind(err, 'NotFound') && /fake registry/.test((err as Error).message));
    assert.ok(asked.length > 0, 'the fake was asked');
    assert.ok(asked.some((call) => call.includes('registry.invalid')), asked.join('; '));
  });
});
