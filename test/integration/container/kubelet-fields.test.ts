/**
 * Fields a Kubernetes 1.33–1.36 kubelet sends with every container, against real runc, conmon and CNI:
 * hugepage limits of 0 for each page size of the node, stop_signal (request, image, default), the image
 * named by its ID with the pod spec's name beside it, env values sent as bytes (cri-api v0.37).
 */
import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { BinaryWriter } from '@bufbuild/protobuf/wire';
import type { ServiceError } from '@grpc/grpc-js';
import { ContainerConfig, ContainerFilter, CreateContainerResponse, type PodSandboxConfig, Signal } from '../../../src/gen/runtime/v1/api.js';
import { ContainerEnvs } from '../../../src/gen/stove/v1/wire.js';
import { detectCgroups } from '../../../src/platform/cgroups.js';
import { containerSuite, ContainerWorld, eventually, rejectsWith } from './world.js';

/** The page sizes the kubelet finds in /sys/kernel/mm/hugepages (`hugepages-2048kB` → `2MB`). */
async function nodePageSizes(): Promise<string[]> {
  const names = await readdir('/sys/kernel/mm/hugepages').catch(() => [] as string[]);
  return names.map((n) => {
    const kb = Number(/^hugepages-(\d+)kB$/.exec(n)![1]);
    return kb >= 1 << 20 ? `${kb >> 20}GB` : kb >= 1 << 10 ? `${kb >> 10}MB` : `${kb}KB`;
  });
}

/**
 * CreateContainer with env values as raw bytes, as a kubelet on cri-api v0.37 sends a Secret's binary
 * data: the config's fields, then its envs as the bytes view encodes them (entries of a repeated field
 * append within one message).
 */
function createWithEnvBytes(world: ContainerWorld, pod: { id: string; config: PodSandboxConfig }, config: ContainerConfig, envs: { key: string; value: Buffer }[]): Promise<string> {
  const configBytes = Buffer.concat([ContainerConfig.encode(config).finish(), ContainerEnvs.encode({ envs }).finish()]);
  const request = Buffer.from(new BinaryWriter().uint32(10).string(pod.id).uint32(18).bytes(configBytes).finish());
  return new Promise((resolve, reject) => {
    world.daemon.clients.rawRuntime.makeUnaryRequest(
      '/runtime.v1.RuntimeService/CreateContainer',
      (bytes: Buffer) => bytes,
      (bytes: Buffer) => CreateContainerResponse.decode(bytes),
      request,
      (err: ServiceError | null, res?: CreateContainerResponse) => (err ? reject(err) : resolve(res!.containerId)),
    );
  });
}

describe('containers: fields of current kubelets (real runc, conmon and CNI)', function () {
  this.timeout(60_000);
  const world = new ContainerWorld();
  let pod: Awaited<ReturnType<ContainerWorld['pod']>>;

  containerSuite(world, 'container tests', { scope: 'containers', setup: async () => { pod = await world.pod(); } });

  it('runs a container with the zero hugepage limits a kubelet sends, with or without the hugetlb controller', async function () {
    const sizes = await nodePageSizes();
    if (sizes.length === 0) this.skip();
    const hugetlb = (await detectCgroups()).hierarchies.some((h) => h.controllers.includes('hugetlb') || h.version === 2);
    const zeros = sizes.map((pageSize) => ({ pageSize, limit: 0n }));
    const id = await world.run(pod, world.config('sleeper', { linux: { resources: { hugepageLimits: zeros } } }));
    assert.equal((await world.exec(id, ['echo', 'up'])).stdout, 'up\n');
    if (!hugetlb) {
      assert.equal((await world.info(id)).runtimeSpec.linux.resources.hugepageLimits, undefined);
      // A limit that would go unenforced is refused, naming it; nothing of the attempt is left.
      const nonZero = [{ pageSize: sizes[0]!, limit: 4n << 20n }];
      await rejectsWith(
        world.create(pod, world.config('sleeper', { linux: { resources: { hugepageLimits: nonZero } } })),
        'INVALID_ARGUMENT',
        new RegExp(`huge pages limits ${sizes[0]}=4194304 cannot be enforced: the hugetlb cgroup controller is missing`),
      );
      const log = world.daemon.output();
      assert.equal(log.split('\n').filter((l) => l.includes('zero hugepage limits are not set')).length, 1, 'logged once');
    }
  });

  it('reports the image the pod spec names when the kubelet names the image by its ID', async () => {
    // A kubelet sends the image ID as image and the pod spec's name as user_specified_image; kubectl
    // shows ContainerStatus.image as the pod's image.
    const sleeper = world.image('sleeper');
    const asKubelet = await world.create(pod, world.config('sleeper', { image: { image: sleeper.configDigest, userSpecifiedImage: sleeper.reference } }));
    assert.equal((await world.status(asKubelet)).status!.image!.image, sleeper.reference);
    assert.equal((await world.status(asKubelet)).status!.imageId, sleeper.configDigest);
    // By ID alone (crictl create with an ID): the image's tag, as containerd reports it.
    const byId = await world.create(pod, world.config('sleeper', { image: { image: sleeper.configDigest } }));
    assert.equal((await world.status(byId)).status!.image!.image, sleeper.reference);
    const listed = (await world.daemon.clients.runtime.listContainers({ filter: ContainerFilter.fromPartial({ id: asKubelet }) })).containers;
    assert.equal(listed[0]!.image!.image, sleeper.reference);
  });

  it('stops with stop_signal from the request over the image StopSignal, and reports the effective signal', async () => {
    const rt = world.daemon.clients.runtime;
    const trapUsr2 = ['sh', '-c', 'trap "exit 5" USR2; trap "" TERM USR1; echo ready; while true; do sleep 0.1; done'];
    // The usr1 image's StopSignal is SIGUSR1; the request names SIGUSR2, which this command traps.
    const fromRequest = await world.run(pod, world.config('usr1', { command: trapUsr2, stopSignal: Signal.SIGUSR2 }));
    const fromImage = await world.run(pod, world.config('usr1'));
    const byDefault = await world.run(pod, world.config('busybox', { command: ['sh', '-c', 'trap "exit 9" TERM; echo ready; while true; do sleep 0.1; done'] }));
    for (const id of [fromRequest, fromImage, byDefault]) {
      await eventually('ready', async () => (await world.logLines((await world.status(id)).status!.logPath)).length > 0);
    }
    assert.equal((await world.status(fromRequest)).status!.stopSignal, Signal.SIGUSR2);
    assert.equal((await world.status(fromImage)).status!.stopSignal, Signal.SIGUSR1);
    assert.equal((await world.status(byDefault)).status!.stopSignal, Signal.SIGTERM);

    for (const [id, code] of [[fromRequest, 5], [fromImage, 3], [byDefault, 9]] as const) {
      const t = Date.now();
      await rt.stopContainer({ containerId: id, timeout: 20n });
      assert.ok(Date.now() - t < 5000, 'stopped by its signal, not by SIGKILL after the timeout');
      const st = (await world.status(id)).status!;
      assert.equal(st.exitCode, code);
      assert.equal(st.stopSignal, (await world.status(id)).status!.stopSignal);
    }

    // Kept across a daemon restart.
    const again = await world.run(pod, world.config('usr1', { command: trapUsr2, stopSignal: Signal.SIGUSR2 }));
    await eventually('ready', async () => (await world.logLines((await world.status(again)).status!.logPath)).length > 0);
    await world.pods.restart();
    assert.equal((await world.status(again)).status!.stopSignal, Signal.SIGUSR2);
    await world.daemon.clients.runtime.stopContainer({ containerId: again, timeout: 20n });
    assert.equal((await world.status(again)).status!.exitCode, 5);
  });

  it('refuses a stop_signal outside the enum with INVALID_ARGUMENT', async () => {
    await rejectsWith(world.create(pod, world.config('busybox', { stopSignal: 99 as Signal })), 'INVALID_ARGUMENT', /stop_signal 99 is not a known signal/);
  });

  it('passes env values to the process byte for byte, and refuses binary ones naming the variable', async () => {
    // UTF-8 of every length, U+FFFD itself, control characters and a newline: the container prints its
    // env value as hex.
    const text = Buffer.from('a\u00e9\u20ac\u{1F600}\uFFFD\x01\x1b[0m\x7f\nend', 'utf8');
    const printer = world.config('busybox', { command: ['sh', '-c', 'printf %s "$TEXT" | od -An -v -tx1'] });
    const id = await createWithEnvBytes(world, pod, printer, [{ key: 'TEXT', value: text }]);
    await world.daemon.clients.runtime.startContainer({ containerId: id });
    const status = await world.waitExited(id);
    assert.equal(status.exitCode, 0);
    const hex = (await world.logLines(status.logPath)).map((l) => l.text).join(' ').trim().split(/\s+/).join('');
    assert.equal(hex, text.toString('hex'));
    const env = (await world.info(id)).runtimeSpec.process.env as string[];
    assert.ok(env.includes(`TEXT=${text.toString('utf8')}`));

    // Binary data (a DER certificate's first bytes, an invalid sequence) cannot pass through the
    // runtime's JSON unchanged: INVALID_ARGUMENT before any work, the value never shown.
    const binary = Buffer.from([0x30, 0x82, 0x03, 0xff, 0xc3, 0x28]);
    const other = world.config('busybox', { command: ['true'] });
    const count = async () => (await world.daemon.clients.runtime.listContainers({ filter: undefined })).containers.length;
    const before = await count();
    const message = await rejectsWith(
      createWithEnvBytes(world, pod, other, [{ key: 'FINE', value: Buffer.from('ok') }, { key: 'KEYSTORE', value: binary }]),
      'INVALID_ARGUMENT',
      new RegExp(`environment variable "KEYSTORE" of container "${other.metadata!.name}": its value is binary data, not UTF-8 text`),
    );
    assert.doesNotMatch(message, /\ufffd|0\x82/);
    assert.equal(await count(), before, 'nothing is created');
    // The name is free: the same config with text values is created.
    const again = await createWithEnvBytes(world, pod, other, [{ key: 'KEYSTORE', value: Buffer.from(binary.toString('base64')) }]);
    assert.ok(again);
  });
});
