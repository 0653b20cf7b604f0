import assert from 'node:assert/strict';
import { ImageStores } from '../../../src/images/image-stores.js';
import type { ImageService } from '../../../src/images/image-service.js';
import { StoveError } from '../../../src/common/errors.js';

/** A store that records the calls it gets and holds the containers it is told about. */
function fakeStore(name: string, held: string[] = [], usage = { images: 0n, containers: 0n }) {
  const calls: string[] = [];
  const store = {
    calls,
    holdsFor: (id: string) => held.includes(id),
    heldImage: (id: string) => (held.includes(id) ? `sha256:${name}` : undefined),
    holders: () => held,
    removeRootfs: async (id: string) => void calls.push(`remove ${id}`),
    rootfsUsage: async (id: string) => (calls.push(`usage ${id}`), { bytes: 1n, inodes: 1n }),
    writableLayerFs: () => `/fs/${name}`,
    getImage: (spec: string) => (calls.push(`get ${spec}`), { id: spec }),
    mountRootfs: async (spec: string, id: string, _target: string, options: object) => {
      calls.push(`mount ${spec} ${id} ${JSON.stringify(options)}`);
      return 'host' as const;
    },
    list: () => [{}, {}],
    fsInfo: async () => ({
      images: { mountpoint: `/images/${name}`, bytes: usage.images, inodes: 1n },
      containers: { mountpoint: '/layers', bytes: usage.containers, inodes: 2n },
    }),
  };
  return store;
}

describe('image stores per runtime handler', () => {
  const shared = fakeStore('shared', ['c-shared'], { images: 10n, containers: 5n });
  const kata = fakeStore('kata', ['c-kata', 'c-kata.iv0'], { images: 20n, containers: 7n });
  const stores = new ImageStores({
    shared: shared as unknown as ImageService,
    own: new Map([['kata', kata as unknown as ImageService]]),
    handlers: ['runc', 'kata', 'crun'],
  });

  it('gives each handler its store: its own, else the shared one reported under ""', () => {
    assert.equal(stores.forHandler('').service, shared as unknown);
    assert.deepEqual(stores.forHandler('runc'), { runtimeHandler: '', service: shared });
    assert.deepEqual(stores.forHandler('crun'), { runtimeHandler: '', service: shared });
    assert.deepEqual(stores.forHandler('kata'), { runtimeHandler: 'kata', service: kata });
    assert.deepEqual(stores.stores().map((s) => s.runtimeHandler), ['', 'kata']);
    assert.equal(stores.hasOwnStore('kata'), true);
    assert.equal(stores.hasOwnStore('crun'), false);
    assert.equal(stores.count(), 4);
  });

  it('refuses a handler that is not configured as INVALID_ARGUMENT, naming the configured ones', () => {
    assert.throws(
      () => stores.forHandler('gvisor'),
      (err: unknown) => err instanceof StoveError && err.kind === 'InvalidArgument' && /runtime handler "gvisor" is not configured \(runtime handlers: "runc", "kata", "crun"\)/.test(err.message),
    );
  });

  it("sends a container's calls to the store that holds it", async () => {
    await stores.removeRootfs('c-kata');
    await stores.rootfsUsage('c-shared');
    assert.deepEqual(kata.calls, ['remove c-kata']);
    assert.deepEqual(shared.calls, ['usage c-shared']);
    assert.equal(stores.heldImage('c-kata'), 'sha256:kata');
    assert.equal(stores.writableLayerFs('c-kata'), '/fs/kata');
    // Held by no store (an interrupted create): the shared store cleans up.
    await stores.removeRootfs('c-none');
    assert.equal(shared.calls.at(-1), 'remove c-none');
    assert.deepEqual(stores.holders().sort(), ['c-kata', 'c-kata.iv0', 'c-shared']);
  });

  it("takes a pod's images from its handler's store", async () => {
    stores.getImage('img', 'kata');
    await stores.mountRootfs('img', 'c1', '/t', { runtimeHandler: 'kata' });
    assert.deepEqual(kata.calls.slice(-2), ['get img', 'mount img c1 {}']);
    stores.getImage('img', 'crun');
    assert.equal(shared.calls.at(-1), 'get img');
  });

  it('reports every image store and one writable layers filesystem with the containers of all', async () => {
    const info = await stores.fsInfo();
    assert.deepEqual(info.images.map((u) => [u.mountpoint, u.bytes]), [['/images/shared', 10n], ['/images/kata', 20n]]);
    assert.deepEqual(info.containers, { mountpoint: '/layers', bytes: 12n, inodes: 4n });
  });
});
