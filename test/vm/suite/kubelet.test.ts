/**
 * The real kubelet (Kubernetes v1.36, test/e2e/cluster/build.sh) on the guest's node, in standalone
 * mode (no API server: static pods from its manifest directory), with Stove as its runtime and both
 * on the driver the guest was booted for (`cgroupDriver: systemd` and `runtime.cgroup_driver =
 * "systemd"` in the systemd run). What the kubelet does is read back through Stove's CRI socket (pod
 * sandboxes, containers and their attempts), the v2 files and systemd's units, and the kubelet's own
 * read-only `/pods`; AppArmor's RuntimeDefault where the node has AppArmor; its checkpoint API
 * (KEP-2008) where CRIU works. Needs the binary: make test-vm passes it (test/vm/run.sh --kubelet).
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile, rm, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { execa } from 'execa';
import { ContainerFilter, ContainerState, ImageStatusRequest, PodSandboxFilter, PodSandboxState, type Container, type PodSandbox } from '../../../src/gen/runtime/v1/api.js';
import { probeCriu } from '../../../src/checkpoint/criu.js';
import { cgroupDirs, detectCgroups } from '../../../src/platform/cgroups.js';
import { appArmorEnabled } from '../../../src/platform/proc.js';
import { kubeletParent, parentPath, removeParent } from '../../helpers/cgroup-driver.js';
import { compressLayer, pushBusyboxImage, pushImage, type PushedImage } from '../../helpers/image-builder.js';
import { suiteHooks } from '../../helpers/suite.js';
import { waitFor } from '../../helpers/wait.js';
import { ContainerWorld, skipReason as containerSkipReason } from '../../integration/container/world.js';
import { NODE_NAME, makeKubeletDir, startKubelet, type Kubelet, type KubeletPod } from '../kubelet.js';

const MiB = 1024 * 1024;
/** Every wait is bounded: the guest is emulated, several times slower than the host. */
const POD_RUNNING_MS = 240_000;
const RESTARTS_MS = 150_000;
const POD_GONE_MS = 90_000;

async function skipReason(): Promise<string | undefined> {
  if ((await detectCgroups()).version !== 2) return 'needs a cgroup v2 node (test/vm/run.sh boots one)';
  const bin = process.env.STOVE_VM_KUBELET;
  if (!bin) return 'no kubelet binary in the guest (test/vm/run.sh --kubelet FILE; make test-vm gives its systemd run the one test/e2e/cluster/build.sh builds, with Go 1.26 at /usr/local/go)';
  if (!existsSync(bin)) return `STOVE_VM_KUBELET names ${bin}, which does not exist`;
  return containerSkipReason();
}

/** `sh` that sleeps until SIGTERM, then exits 0 at once (as PID 1 it gets no default action). */
const SLEEP_UNTIL_TERM = `[sh, -c, "trap 'exit 0' TERM; while :; do sleep 1; done"]`;

describe('the kubelet on a cgroup v2 node, standalone (guest)', function () {
  this.timeout(POD_RUNNING_MS + RESTARTS_MS + POD_GONE_MS);
  const world = new ContainerWorld();
  const driver = world.pods.driver;
  /** The kubelet's top cgroup parent for this driver (its default cgroupRoot, `/`). */
  const kubepods = driver === 'systemd' ? 'kubepods.slice' : '/kubepods';
  let kubelet: Kubelet | undefined;
  let kubeletDir: string | undefined;
  let image: PushedImage;
  /** Where the kubelet puts checkpoint archives (`<root dir>/checkpoints`); Stove's config allows it. */
  const checkpointsDir = () => join(kubeletDir!, 'root', 'checkpoints');

  suiteHooks({
    what: 'kubelet tests',
    skipReason,
    setup: async () => {
      kubeletDir = await makeKubeletDir();
      world.pods.runtimeToml.push(`checkpoint_dirs = ["${checkpointsDir()}"]`);
      await world.start();
      // Pushed, not pulled: the kubelet pulls it through Stove's PullImage.
      image = await pushBusyboxImage(world.registry, 'vm/kubelet:1', { extraFiles: [{ path: 'etc/vm-kubelet', content: '1\n' }] });
      kubelet = await startKubelet({ bin: process.env.STOVE_VM_KUBELET!, socket: world.daemon.socket, driver, startTimeoutMs: 120_000, dir: kubeletDir });
    },
    tidy: async () => {
      if (!kubelet) return;
      // The kubelet stops the pods of manifests that went; then they are removed as its GC would.
      await kubelet.removeManifests();
      await waitFor(
        'the kubelet to stop its static pods',
        async () => ((await kubelet!.pods()).length === 0 && (await readySandboxes()).length === 0) || undefined,
        POD_GONE_MS,
      );
      await world.removeAll();
    },
    leftovers: () => world.leftovers(),
    cleanup: async () => {
      await kubelet?.removeManifests().catch(() => {});
      await kubelet?.stop().catch(() => {});
      // Made before the kubelet started (its stop removes it): gone too when it never did.
      if (kubeletDir) await rm(kubeletDir, { recursive: true, force: true });
      await world.cleanup();
      // The kubelet's QoS levels: nothing later in the guest runs under them.
      await removeParent(kubepods).catch(() => {});
    },
  });

  const runtime = () => world.daemon.clients.runtime;

  async function readySandboxes(): Promise<PodSandbox[]> {
    const { items } = await runtime().listPodSandbox({ filter: PodSandboxFilter.fromPartial({ state: { state: PodSandboxState.SANDBOX_READY } }) });
    return items;
  }

  /** The ready sandbox of the static pod `name` (the kubelet names it `<name>-<node>`). */
  async function sandboxOf(name: string): Promise<PodSandbox | undefined> {
    return (await readySandboxes()).find((s) => s.metadata?.name === `${name}-${NODE_NAME}`);
  }

  async function containersOf(sandbox: PodSandbox): Promise<Container[]> {
    return (await runtime().listContainers({ filter: ContainerFilter.fromPartial({ podSandboxId: sandbox.id }) })).containers;
  }

  /** The kubelet's view of the static pod `name`, once its phase is Running and every container ready. */
  async function runningPod(name: string): Promise<{ sandbox: PodSandbox; pod: KubeletPod }> {
    return waitFor(
      `static pod ${name} to run, seen by Stove and by the kubelet`,
      async () => {
        const sandbox = await sandboxOf(name);
        const pod = (await kubelet!.pods()).find((p) => p.metadata.name === `${name}-${NODE_NAME}`);
        const statuses = pod?.status.containerStatuses ?? [];
        if (!sandbox || pod?.status.phase !== 'Running' || statuses.length === 0 || !statuses.every((s) => s.ready)) return undefined;
        return { sandbox, pod };
      },
      { timeoutMs: POD_RUNNING_MS, intervalMs: 1000 },
    ).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}\n--- the kubelet's log (end):\n${kubelet!.log().slice(-6000)}`);
    });
  }

  it('runs a static pod through Stove, in the cgroups the kubelet named for its QoS class', async () => {
    await kubelet!.addManifest(
      'static',
      `apiVersion: v1
kind: Pod
metadata: {name: static, namespace: vm}
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: main
    image: ${image.reference}
    imagePullPolicy: IfNotPresent
    command: ${SLEEP_UNTIL_TERM}
    resources: {requests: {cpu: 100m, memory: 32Mi}, limits: {memory: 64Mi}}
`,
    );
    const { sandbox, pod } = await runningPod('static');
    assert.equal(sandbox.metadata!.namespace, 'vm');
    assert.equal(sandbox.metadata!.uid, pod.metadata.uid);
    const [main, ...others] = await containersOf(sandbox);
    assert.deepEqual(others, [], 'one container');
    assert.equal(main!.metadata!.name, 'main');
    assert.equal(main!.state, ContainerState.CONTAINER_RUNNING);
    assert.equal(pod.status.containerStatuses![0]!.containerID, `stove://${main!.id}`);
    // The pod IP the kubelet reports is the one Stove's CNI gave the sandbox.
    const status = (await runtime().podSandboxStatus({ podSandboxId: sandbox.id, verbose: false })).status!;
    assert.equal(pod.status.podIP, status.network!.ip);
    const pulled = await world.daemon.clients.image.imageStatus(ImageStatusRequest.fromPartial({ image: { image: image.reference } }));
    assert.ok(pulled.image, 'the kubelet pulled the image');

    // Where the kubelet put it: its burstable level, the pod's own level below, the container's cgroup
    // (a systemd scope under the systemd driver) with the limit the kubelet translated.
    const parent = kubeletParent(driver, kubepods, 'burstable', `pod${pod.metadata.uid}`);
    const { pid, cgroupsPath } = await world.info(main!.id);
    const expected = driver === 'systemd' ? `${parentPath(parent)}/stove-${main!.id}.scope` : `${parentPath(parent)}/${main!.id}`;
    assert.equal((await readFile(`/proc/${pid}/cgroup`, 'utf8')).trim(), `0::${expected}`);
    const dir = cgroupDirs(await detectCgroups(), cgroupsPath).unified!;
    assert.equal((await readFile(join(dir, 'memory.max'), 'utf8')).trim(), String(64 * MiB));
    if (driver === 'systemd') {
      const slice = (await execa('systemctl', ['show', '-p', 'Slice', '--value', `stove-${main!.id}.scope`])).stdout.trim();
      assert.equal(slice, parent);
      assert.match(kubelet!.log(), /cgroup driver setting received from the CRI runtime.*cgroupDriver="systemd"/);
    }
  });

  it('restarts a container whose exec liveness probe fails, and only that one', async () => {
    const probe = (command: string, failureThreshold: number) => `{exec: {command: ${command}}, periodSeconds: 2, timeoutSeconds: 30, failureThreshold: ${failureThreshold}}`;
    await kubelet!.addManifest(
      'liveness',
      `apiVersion: v1
kind: Pod
metadata: {name: liveness, namespace: vm}
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: steady
    image: ${image.reference}
    command: ${SLEEP_UNTIL_TERM}
    livenessProbe: ${probe('[cat, /etc/vm-kubelet]', 3)}
  - name: unhealthy
    image: ${image.reference}
    command: ${SLEEP_UNTIL_TERM}
    livenessProbe: ${probe('[cat, /tmp/healthy]', 1)}
`,
    );
    const { sandbox } = await runningPod('liveness');
    // Every attempt of `unhealthy` Stove was asked to create, as they come: 0, then 1 at once after the
    // first failure, then 2 after the kubelet's back-off (10 s).
    const seen = new Set<number>();
    const restarted = await waitFor(
      'the kubelet to restart the unhealthy container twice',
      async () => {
        const containers = await containersOf(sandbox);
        for (const c of containers) if (c.metadata?.name === 'unhealthy') seen.add(c.metadata.attempt);
        return seen.has(2) ? containers : undefined;
      },
      { timeoutMs: RESTARTS_MS, intervalMs: 500 },
    ).catch((err: unknown) => {
      throw new Error(`${(err as Error).message} (attempts seen: ${[...seen].join(' ')})\n--- the kubelet's log (end):\n${kubelet!.log().slice(-6000)}`);
    });
    assert.ok(seen.has(1), `attempt 1 before attempt 2 (seen: ${[...seen].join(' ')})`);
    const steady = restarted.filter((c) => c.metadata?.name === 'steady');
    assert.deepEqual(steady.map((c) => [c.metadata!.attempt, ContainerState[c.state]]), [[0, 'CONTAINER_RUNNING']], 'the steady container, probed as often, runs its first attempt');
    // The kubelet keeps the last dead attempt: stopped by the kubelet, exited as its TERM trap says.
    const dead = restarted.filter((c) => c.metadata?.name === 'unhealthy' && c.state === ContainerState.CONTAINER_EXITED);
    assert.ok(dead.length >= 1, 'a dead attempt is kept');
    assert.equal((await world.status(dead[0]!.id)).status!.exitCode, 0);

    // The kubelet's own count, and why: the probe's command ran in the container and failed there.
    const counts = await waitFor(
      'the kubelet to report two restarts',
      async () => {
        const pod = (await kubelet!.pods()).find((p) => p.metadata.name === `liveness-${NODE_NAME}`);
        const count = (name: string) => pod?.status.containerStatuses?.find((s) => s.name === name)?.restartCount;
        return (count('unhealthy') ?? 0) >= 2 ? { unhealthy: count('unhealthy'), steady: count('steady') } : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 1000 },
    );
    assert.equal(counts.steady, 0);
    const failures = logRecords(kubelet!.log()).filter((l) => l.includes('"Probe failed"') && l.includes('probeType="Liveness"'));
    assert.ok(failures.some((l) => l.includes('containerName="unhealthy"') && l.includes("can't open '/tmp/healthy'")), `a failed probe of unhealthy in the kubelet's log:\n${failures.join('\n')}`);
    assert.deepEqual(failures.filter((l) => l.includes('containerName="steady"')), [], 'no failed probe of steady');
  });

  it('runs a pod asking for appArmorProfile RuntimeDefault under stove-default, and a container asking for Unconfined without it', async function () {
    if (!(await appArmorEnabled())) {
      console.log('      skipped: AppArmor is not enabled on this node');
      this.skip();
    }
    await kubelet!.addManifest(
      'apparmor',
      `apiVersion: v1
kind: Pod
metadata: {name: apparmor, namespace: vm}
spec:
  terminationGracePeriodSeconds: 10
  securityContext: {appArmorProfile: {type: RuntimeDefault}}
  containers:
  - name: confined
    image: ${image.reference}
    command: ${SLEEP_UNTIL_TERM}
  - name: open
    image: ${image.reference}
    command: ${SLEEP_UNTIL_TERM}
    securityContext: {appArmorProfile: {type: Unconfined}}
`,
    );
    const { sandbox } = await runningPod('apparmor');
    const byName = new Map((await containersOf(sandbox)).map((c) => [c.metadata!.name, c.id]));
    const attr = async (name: string) => (await readFile(`/proc/${(await world.info(byName.get(name)!)).pid}/attr/current`, 'utf8')).trim();
    assert.equal(await attr('confined'), 'stove-default (enforce)');
    assert.equal(await attr('open'), 'unconfined');
    const sysrq = await world.exec(byName.get('confined')!, ['sh', '-c', 'echo h > /proc/sysrq-trigger']);
    assert.notEqual(sysrq.exitCode, 0, 'the kubelet\'s confined container cannot trigger SysRq');
  });

  it('checkpoints a running container through the kubelet API, and a static pod restores it from a checkpoint image made of the archive', async function () {
    this.timeout(600_000);
    const criu = await probeCriu();
    if (!criu.ok) {
      console.log(`      skipped: CRIU does not work here: ${criu.message}`);
      this.skip();
    }
    await kubelet!.addManifest(
      'counter',
      `apiVersion: v1
kind: Pod
metadata: {name: counter, namespace: vm}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: count
    image: ${image.reference}
    command: [sh, -c, "i=0; while true; do echo $i; i=$((i+1)); sleep 0.3; done"]
`,
    );
    const { sandbox } = await runningPod('counter');
    const [count] = await containersOf(sandbox);
    const logPath = (await world.status(count!.id)).status!.logPath;
    await waitFor('the counter to reach 5', async () => ((await numbersIn(world, logPath)).length >= 5 ? true : undefined), 60_000);

    const started = Date.now();
    const items = await kubelet!.checkpoint('vm', `counter-${NODE_NAME}`, 'count', 240);
    console.log(`      the kubelet's checkpoint took ${Date.now() - started} ms: ${items.join(' ')}`);
    assert.equal(items.length, 1);
    const archive = items[0]!;
    assert.equal(dirname(archive), checkpointsDir());
    assert.match(basename(archive), new RegExp(`^checkpoint-counter-${NODE_NAME}_vm-count-.+\\.tar$`));
    assert.equal((await stat(archive)).mode & 0o077, 0, 'the archive (the memory of the processes) is for root alone');
    const configDump = JSON.parse((await execa('tar', ['-xOf', archive, 'config.dump'])).stdout) as Record<string, unknown>;
    assert.equal(configDump['id'], count!.id);
    assert.equal(configDump['rootfsImageName'], image.reference);

    // The forensic checkpoint leaves the pod as it was: the same container, running, no restart.
    const pod = (await kubelet!.pods()).find((p) => p.metadata.name === `counter-${NODE_NAME}`);
    assert.equal(pod?.status.containerStatuses?.[0]?.restartCount, 0);
    assert.equal((await world.status(count!.id)).status!.state, ContainerState.CONTAINER_RUNNING);

    // The kubelet restores from an image (a pod spec names nothing else): the archive as a checkpoint
    // image's one layer, pushed to the registry; a static pod naming it counts on from where it was.
    const archived = (await execa('tar', ['-xOf', archive, 'container.log'])).stdout.split('\n').map((l) => l.split(' ').slice(3).join(' ')).filter((t) => /^\d+$/.test(t)).map(Number);
    const checkpointImage = await pushImage(world.registry, 'vm/counter-checkpoint:1', {
      layers: [compressLayer(await readFile(archive), 'gzip')],
      annotations: { 'io.kubernetes.cri-o.annotations.checkpoint.name': 'count' },
    });
    await kubelet!.addManifest(
      'restored',
      `apiVersion: v1
kind: Pod
metadata: {name: restored, namespace: vm}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: count
    image: ${checkpointImage.reference}
    imagePullPolicy: IfNotPresent
`,
    );
    const { sandbox: restoredSandbox } = await runningPod('restored');
    const [restored] = await containersOf(restoredSandbox);
    const info = JSON.parse((await world.status(restored!.id, true)).info.info!) as { restored?: boolean; restoredFrom?: string; pid: number; cgroupsPath: string };
    assert.equal(info.restored, true);
    assert.equal(info.restoredFrom, checkpointImage.reference);
    const restoredLog = (await world.status(restored!.id)).status!.logPath;
    await waitFor('the restored counter to count', async () => ((await numbersIn(world, restoredLog)).length >= archived.length + 3 ? true : undefined), 120_000);
    const fresh = (await numbersIn(world, restoredLog)).slice(archived.length);
    assert.ok(fresh[0]! > archived.at(-1)! && fresh[0]! <= archived.at(-1)! + 3, `counts on from ${archived.at(-1)} (${fresh.slice(0, 5).join(' ')})`);
    // In the cgroup the kubelet named for the restored pod, not the checkpointed one's.
    const line = (await readFile(`/proc/${info.pid}/cgroup`, 'utf8')).trim();
    assert.equal(join('/sys/fs/cgroup', line.replace(/^0::/, '')), cgroupDirs(await detectCgroups(), info.cgroupsPath).unified);
  });
});

/** The numbers a counting container wrote, from its CRI log file. */
async function numbersIn(world: ContainerWorld, path: string): Promise<number[]> {
  return (await world.logLines(path)).map((l) => l.text).filter((t) => /^\d+$/.test(t)).map(Number);
}

/** klog's records: a line with its header (`I1203 12:00:00.000000 …`) and the lines of a multi-line value after it. */
function logRecords(log: string): string[] {
  const records: string[] = [];
  for (const line of log.split('\n')) {
    if (/^[IWEF]\d{4} /.test(line) || records.length === 0) records.push(line);
    else records[records.length - 1] += `\n${line}`;
  }
  return records;
}
