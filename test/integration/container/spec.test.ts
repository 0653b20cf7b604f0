/**
 * What a container gets from its OCI spec, observed from inside real containers (through ExecSync and
 * the CRI log): process rules (entrypoint, cmd, env, working dir), users and groups from the image's
 * /etc/passwd, capabilities, read-only root, masked and read-only paths, mount propagation, PID
 * namespaces.
 */
import assert from 'node:assert/strict';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { MountPropagation, NamespaceMode, SupplementalGroupsPolicy } from '../../../src/gen/runtime/v1/api.js';
import { capabilitiesFromMask } from '../../../src/platform/proc.js';
import { CONTAINERD_DEFAULT_CAPABILITIES } from '../../../src/config/schema.js';
import { containerSuite, ContainerWorld, eventually, rejectsWith } from './world.js';

describe('containers: spec rules seen from inside (real runc, conmon and CNI)', function () {
  this.timeout(60_000);
  const world = new ContainerWorld();
  let pod: Awaited<ReturnType<ContainerWorld['pod']>>;

  containerSuite(world, 'container tests', { scope: 'containers', setup: async () => { pod = await world.pod(); } });

  /** Runs a container to completion and returns its log text (stdout and stderr lines). */
  async function output(config: ReturnType<typeof world.config>, p = pod): Promise<string> {
    const id = await world.run(p, config);
    const st = await world.waitExited(id);
    return (await world.logLines(st.logPath)).map((l) => l.text).join('\n');
  }

  it('takes entrypoint, cmd, env, working dir and user from the image, and lets the request override them', async () => {
    assert.equal(await output(world.config('app')), 'hello from /srv/app as 1000:1000');
    // args replace Cmd, the Entrypoint stays; CRI env wins over the image's; working_dir replaces WorkingDir.
    const custom = await output(
      world.config('app', {
        args: ['echo "$GREETING $ONLY_IN_IMAGE $EXTRA $HOSTNAME in $(pwd)"'],
        envs: [{ key: 'GREETING', value: 'bonjour' }, { key: 'EXTRA', value: 'x=y' }],
        workingDir: '/tmp',
      }),
    );
    assert.equal(custom, `bonjour 1 x=y ${pod.config.hostname || (await readFile('/proc/sys/kernel/hostname', 'utf8')).trim()} in /tmp`);
    // command replaces the Entrypoint and drops Cmd.
    assert.equal(await output(world.config('app', { command: ['echo', 'plain'] })), 'plain');
    assert.equal(await output(world.config('app', { command: ['sh', '-c', 'echo $PATH'] })), '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
  });

  it('resolves users and groups from the image and reports them in the status', async () => {
    const rt = world.daemon.clients.runtime;
    const sleep = { command: ['sleep', '3600'] };
    // The image's user "user": uid/gid 1000, plus "users" (100) from the image's /etc/group.
    const fromImage = await world.run(pod, world.config('app', sleep));
    assert.equal((await world.exec(fromImage, ['id'])).stdout, 'uid=1000(user) gid=1000(user) groups=100(users),1000(user)\n');
    assert.deepEqual((await world.status(fromImage)).status!.user!.linux, { uid: 1000n, gid: 1000n, supplementalGroups: [100n, 1000n] });
    // run_as_username.
    const www = await world.run(pod, world.config('busybox', { ...sleep, linux: { securityContext: { runAsUsername: 'www-data' } } }));
    assert.equal((await world.exec(www, ['id', '-u', '-n'])).stdout, 'www-data\n');
    // run_as_user + run_as_group + supplemental groups (Merge adds the image's groups; Strict does not).
    const merged = await world.run(
      pod,
      world.config('busybox', { ...sleep, linux: { securityContext: { runAsUser: { value: 1000n }, runAsGroup: { value: 33n }, supplementalGroups: [2000n] } } }),
    );
    assert.equal((await world.exec(merged, ['id', '-G'])).stdout, '33 100 2000\n');
    assert.deepEqual((await world.status(merged)).status!.user!.linux, { uid: 1000n, gid: 33n, supplementalGroups: [33n, 100n, 2000n] });
    const strict = await world.run(
      pod,
      world.config('busybox', {
        ...sleep,
        linux: { securityContext: { runAsUser: { value: 1000n }, supplementalGroups: [2000n], supplementalGroupsPolicy: SupplementalGroupsPolicy.Strict } },
      }),
    );
    assert.equal((await world.exec(strict, ['id', '-G'])).stdout, '1000 2000\n');
    // critest SupplementalGroupsPolicy=Strict: the status reports the effective user without the image's groups.
    assert.deepEqual((await world.status(strict)).status!.user!.linux, { uid: 1000n, gid: 1000n, supplementalGroups: [1000n, 2000n] });
    // An unknown user name is refused before anything runs.
    await rejectsWith(
      rt.createContainer({ podSandboxId: pod.id, config: world.config('busybox', { linux: { securityContext: { runAsUsername: 'ghost' } } }), sandboxConfig: pod.config }),
      'INVALID_ARGUMENT',
      /ghost/,
    );
  });

  it('gives the default capabilities, applies add and drop, and ExecSync runs with them', async () => {
    const caps = async (id: string) => {
      const line = (await world.exec(id, ['grep', 'CapEff', '/proc/self/status'])).stdout;
      return capabilitiesFromMask(line.split(/\s+/)[1]!).sort();
    };
    const plain = await world.run(pod, world.config('sleeper'));
    assert.deepEqual(await caps(plain), [...CONTAINERD_DEFAULT_CAPABILITIES].sort());
    const tuned = await world.run(pod, world.config('sleeper', { linux: { securityContext: { capabilities: { addCapabilities: ['NET_ADMIN'], dropCapabilities: ['KILL', 'CHOWN'] } } } }));
    const expected = [...CONTAINERD_DEFAULT_CAPABILITIES.filter((c) => c !== 'CAP_KILL' && c !== 'CAP_CHOWN'), 'CAP_NET_ADMIN'].sort();
    assert.deepEqual(await caps(tuned), expected);
    const none = await world.run(pod, world.config('sleeper', { linux: { securityContext: { capabilities: { dropCapabilities: ['ALL'] } } } }));
    assert.deepEqual(await caps(none), []);
    assert.notEqual((await world.exec(none, ['chown', '1000', '/tmp'])).exitCode, 0, 'no CAP_CHOWN');
  });

  it('honours a read-only root and masked and read-only paths', async () => {
    const ro = await world.run(pod, world.config('sleeper', { linux: { securityContext: { readonlyRootfs: true } } }));
    const touch = await world.exec(ro, ['touch', '/new-file']);
    assert.notEqual(touch.exitCode, 0);
    assert.match(touch.stderr, /Read-only file system/);
    const masked = await world.run(
      pod,
      world.config('sleeper', { linux: { securityContext: { maskedPaths: ['/proc/timer_list', '/sys/firmware'], readonlyPaths: ['/proc/sys'] } } }),
    );
    // /proc/timer_list has text on the host; masked, it reads as /dev/null.
    assert.equal((await world.exec(masked, ['sh', '-c', 'wc -c < /proc/timer_list'])).stdout.trim(), '0');
    assert.equal((await world.exec(masked, ['ls', '/sys/firmware'])).stdout, '');
    const write = await world.exec(masked, ['sh', '-c', 'echo 1 > /proc/sys/kernel/domainname']);
    assert.match(write.stderr, /Read-only file system/);
    // The writable root of a normal container.
    const rw = await world.run(pod, world.config('sleeper'));
    assert.equal((await world.exec(rw, ['sh', '-c', 'echo data > /new-file && cat /new-file'])).stdout, 'data\n');
  });

  it('mounts host paths with private, host-to-container and bidirectional propagation', async function () {
    const rt = world.daemon.clients.runtime;
    const base = join(world.daemon.dir, 'prop');
    await mkdir(base, { recursive: true });
    // The host's root is private here: a shared tmpfs gives the mounts something to propagate through.
    await execa('mount', ['-t', 'tmpfs', 'tmpfs', base]);
    try {
      await execa('mount', ['--make-shared', base]);
      await mkdir(join(base, 'both'));
      const privPod = await world.pod({ linux: { securityContext: { privileged: true } } });
      const id = await world.run(
        privPod,
        world.config('sleeper', {
          linux: { securityContext: { privileged: true } },
          mounts: [
            { containerPath: '/private', hostPath: base, propagation: MountPropagation.PROPAGATION_PRIVATE },
            { containerPath: '/slave', hostPath: base, propagation: MountPropagation.PROPAGATION_HOST_TO_CONTAINER },
            { containerPath: '/both', hostPath: join(base, 'both'), propagation: MountPropagation.PROPAGATION_BIDIRECTIONAL },
            { containerPath: '/ro', hostPath: base, readonly: true },
          ],
        }),
      );
      // A mount made on the host afterwards reaches only the host-to-container mount.
      await mkdir(join(base, 'later'));
      await execa('mount', ['-t', 'tmpfs', 'tmpfs', join(base, 'later')]);
      await writeFile(join(base, 'later', 'from-host'), 'h');
      assert.equal((await world.exec(id, ['cat', '/slave/later/from-host'])).stdout, 'h');
      assert.notEqual((await world.exec(id, ['cat', '/private/later/from-host'])).exitCode, 0);
      // A mount made in the container reaches the host through the bidirectional mount.
      const inner = await world.exec(id, ['sh', '-c', 'mkdir -p /both/inner && mount -t tmpfs tmpfs /both/inner && echo c > /both/inner/from-ctr']);
      assert.equal(inner.exitCode, 0, inner.stderr);
      await eventually('the container mount on the host', async () => (await readFile(join(base, 'both', 'inner', 'from-ctr'), 'utf8')) === 'c\n');
      assert.match((await world.exec(id, ['touch', '/ro/x'])).stderr, /Read-only file system/);
      await rt.removeContainer({ containerId: id });
      await rt.removePodSandbox({ podSandboxId: privPod.id });
    } finally {
      await execa('umount', ['-R', base], { reject: false });
    }
    // Bidirectional needs a shared source mount: refused on the private /tmp.
    await rejectsWith(
      rt.createContainer({
        podSandboxId: pod.id,
        config: world.config('sleeper', { mounts: [{ containerPath: '/x', hostPath: base, propagation: MountPropagation.PROPAGATION_BIDIRECTIONAL }] }),
        sandboxConfig: pod.config,
      }),
      'FAILED_PRECONDITION',
      /not a shared mount/,
    );
  });

  it('shares the pod PID namespace, or gives the container its own', async () => {
    const shared = await world.run(pod, world.config('sleeper'));
    assert.match((await world.exec(shared, ['cat', '/proc/1/cmdline'])).stdout, /pause/);
    const own = await world.run(pod, world.config('sleeper', { linux: { securityContext: { namespaceOptions: { pid: NamespaceMode.CONTAINER } } } }));
    assert.equal((await world.exec(own, ['cat', '/proc/1/cmdline'])).stdout, 'sleep\x003600\x00');
    // TARGET joins another container's namespace.
    const target = await world.run(
      pod,
      world.config('sleeper', { linux: { securityContext: { namespaceOptions: { pid: NamespaceMode.TARGET, targetId: own } } } }),
    );
    assert.equal((await world.exec(target, ['cat', '/proc/1/cmdline'])).stdout, 'sleep\x003600\x00');
    // A container with its own PID namespace dies with its init; SIGKILL reaches everything in it.
    await world.daemon.clients.runtime.stopContainer({ containerId: own, timeout: 0n });
  });
});
