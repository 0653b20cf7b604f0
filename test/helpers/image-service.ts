/** In-process image tests: an ImageService on a temp dir, and a loopback registry to pull from. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ImageService, imageParts, type ImageServiceOptions } from '../../src/images/image-service.js';
import { silentLogger } from '../../src/common/logger.js';
import { unmount, mountPoints } from '../../src/platform/mount.js';
import { startRegistry, type TestRegistry } from './registry.js';

export interface ServiceFixture {
  dir: string;
  images: ImageService;
  options: ImageServiceOptions;
  /** Closes the service and opens a new one on the same dirs (a daemon restart). */
  reopen(): Promise<ImageService>;
  cleanup(): Promise<void>;
}

export async function openService(overrides: Partial<ImageServiceOptions> = {}): Promise<ServiceFixture> {
  const dir = await mkdtemp(join(tmpdir(), 'stove-images-'));
  const options: ImageServiceOptions = {
    imagesDir: join(dir, 'images'),
    stateDir: join(dir, 'state'),
    containerDir: (id) => join(dir, 'containers', id),
    maxConcurrentDownloads: 3,
    stallTimeoutSeconds: 60,
    registries: {},
    syncBlobs: false,
    log: silentLogger,
    ...overrides,
  };
  const fixture: ServiceFixture = {
    dir,
    options,
    images: await ImageService.open(options, imageParts(options)),
    async reopen() {
      await fixture.images.close();
      fixture.images = await ImageService.open(options, imageParts(options));
      return fixture.images;
    },
    async cleanup() {
      await fixture.images.close().catch(() => {});
      for (const point of await mountPoints()) if (point.startsWith(dir + '/')) await unmount(point, true).catch(() => {});
      await rm(dir, { recursive: true, force: true, maxRetries: 5 });
    },
  };
  return fixture;
}

/** What an image suite's tests use: the suite's registry, and the current test's service. */
export interface ImageSuite {
  registry: TestRegistry;
  /** Opened before each test, cleaned up after it (a test may replace it). */
  fx: ServiceFixture;
}

/** Registers the hooks (call it in a `describe` body): a registry for the suite, a fresh service for each test. */
export function imageSuite(): ImageSuite {
  const suite = {} as ImageSuite;
  before(async () => {
    suite.registry = await startRegistry();
  });
  after(async () => {
    await suite.registry?.stop();
  });
  beforeEach(async () => {
    suite.fx = await openService();
  });
  afterEach(async () => {
    await suite.fx?.cleanup();
  });
  return suite;
}
