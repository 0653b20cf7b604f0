/**
 * Item 3 of the hardening: files Stove reads from an image (here /etc/passwd and /etc/group, for the
 * image's `User`) cannot block or exhaust the daemon. An image whose /etc/passwd and /etc/group are
 * FIFOs used to leave libuv's threadpool blocked in open(2) (every file operation of the daemon then
 * waits); a character device there would be read until memory runs out. Now each create is refused
 * at once with FAILED_PRECONDITION naming the file, and the daemon keeps answering while they run.
 */
import assert from 'node:assert/strict';
import { pushBusyboxImage } from '../helpers/image-builder.js';
import { ContainerState } from '../../src/gen/runtime/v1/api.js';
import { containerSuite, ContainerWorld, rejectsWith } from '../integration/container/world.js';

/** How long one refused create or one call made meanwhile may take on a busy 2-core machine. */
const PROMPT_MS = 2000;

async function timed<T>(p: Promise<T>): Promise<{ value: T; ms: number }> {
  const started = performance.now();
  const value = await p;
  return { value, ms: performance.now() - started };
}

describe('security: special files in an image cannot stall the daemon (real daemon, runc, conmon)', function () {
  this.timeout(60_000);
  const world = new ContainerWorld();

  containerSuite(world, 'image file security tests', {
    scope: 'pods',
    setup: async () => {
      const images = {
        fifo: [
          { type: 'fifo' as const, path: 'etc/passwd' },
          { type: 'fifo' as const, path: 'etc/group' },
        ],
        // /dev/zero: endless.
        zero: [
          { type: 'char' as const, path: 'etc/passwd', major: 1, minor: 5 },
          { type: 'char' as const, path: 'etc/group', major: 1, minor: 5 },
        ],
        // A link out of the root resolves inside it (to a FIFO there), never to the host's file.
        link: [
          { type: 'fifo' as const, path: 'etc/shadow-fifo' },
          { type: 'symlink' as const, path: 'etc/passwd', target: '/etc/shadow-fifo' },
        ],
      };
      for (const [name, extraFiles] of Object.entries(images)) {
        const pushed = await pushBusyboxImage(world.registry, `security/${name}:1`, { extraFiles, user: 'someone', cmd: ['sleep', '3600'] });
        world.images.set(name, pushed);
        await world.runtime.pull(pushed.reference);
      }
    },
  });

  it('refuses FIFO and device /etc/passwd at once, naming the file, while Version and ListImages answer', async () => {
    const pod = await world.pod();
    const creates = [
      ...Array.from({ length: 4 }, () => world.create(pod, world.config('fifo'))),
      world.create(pod, world.config('zero')),
      world.create(pod, world.config('link')),
    ].map((p) => timed(p.then(() => undefined, (err: unknown) => err)));
    // While the creates run: the daemon's other calls (and their file I/O) go on.
    const version = await timed(world.daemon.clients.runtime.version({ version: 'v1' }));
    const images = await timed(world.daemon.clients.image.listImages({ filter: undefined }));
    assert.ok(version.ms < PROMPT_MS, `Version took ${version.ms.toFixed(0)} ms`);
    assert.ok(images.ms < PROMPT_MS, `ListImages took ${images.ms.toFixed(0)} ms`);
    assert.ok(images.value.images.length >= 3);

    const results = await Promise.all(creates);
    const expected = [
      ...Array(4).fill(/failed to read \/etc\/passwd from the container's root filesystem: "\/etc\/passwd" is a FIFO, not a regular file/),
      /"\/etc\/passwd" is a character device, not a regular file/,
      /"\/etc\/passwd" is a FIFO, not a regular file/,
    ] as RegExp[];
    results.forEach(({ value, ms }, i) => {
      assert.ok(ms < PROMPT_MS * 2, `create ${i} took ${ms.toFixed(0)} ms`);
      assert.ok(value, `create ${i} succeeded`);
    });
    for (const [i, { value }] of results.entries()) await rejectsWith(Promise.reject(value), 'FAILED_PRECONDITION', expected[i]!);

    // Nothing is left blocked: a good container is created and runs.
    const id = await world.run(pod, world.config('sleeper'));
    assert.equal((await world.status(id)).status!.state, ContainerState.CONTAINER_RUNNING);
  });
});
