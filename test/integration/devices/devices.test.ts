/**
 * CDI devices and OCI hooks in real runc containers: CDI spec fixtures in every version Stove reads
 * (device nodes mapped from /dev/null, env, mounts, hooks) requested through `CDI_devices` and through
 * a `cdi.k8s.io/` annotation and checked from inside the container; an unknown device; a spec written
 * after the daemon started; a broken spec beside a good one; OCI hook files selected by annotation and
 * by command, each run at its stage. The hooks write marker files named after the container ID.
 */
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { testRuntimeFeatures } from '../../helpers/oci-runtime.js';
import { runStoveCli } from '../../helpers/stove-process.js';
import { ContainerWorld, containerSuite, rejectsWith } from '../container/world.js';

const VENDOR = 'stove-test.example.com';
const VERSIONS = ['0.3.0', '0.4.0', '0.5.0', '0.6.0', '0.7.0', '0.8.0', '1.0.0', '1.1.0'] as const;
/** `v030` for 0.3.0: the class of that version's fixture spec. */
const tag = (version: string) => `v${version.replaceAll('.', '')}`;

describe('devices: CDI and OCI hooks (real runc containers)', function () {
  this.timeout(120_000);
  const world = new ContainerWorld();
  // Everything the daemon reads lives in one temp dir, made now so the config can name it.
  const dir = mkdtempSync(join(tmpdir(), 'stove-devices-'));
  chmodSync(dir, 0o755);
  const etcCdi = join(dir, 'etc-cdi');
  const runCdi = join(dir, 'run-cdi'); // created by the test that writes a spec after start
  const hooksUsr = join(dir, 'hooks-usr');
  const hooksEtc = join(dir, 'hooks-etc');
  const markers = join(dir, 'markers');
  const share = join(dir, 'share');
  const hookScript = join(dir, 'hook.sh');
  for (const d of [etcCdi, hooksUsr, hooksEtc, markers, share]) mkdirSync(d, { mode: 0o755 });
  writeFileSync(join(share, 'hello'), 'hello from the host\n');
  // $1: a label. Writes "<label> <status>" to markers/<container id>.<label>; with $2 = rootfs also to
  // /hook-<label> in the container's root filesystem (reachable before pivot_root, as createContainer
  // hooks run). The runtime passes the container state (JSON) on stdin.
  writeFileSync(
    hookScript,
    [
      '#!/bin/sh',
      'state=$(cat)',
      'field() { printf "%s" "$state" | sed -n "s/.*\\"$1\\":\\"\\([^\\"]*\\)\\".*/\\1/p"; }',
      'id=$(field id); status=$(field status); bundle=$(field bundle)',
      `echo "$1 $status" > "${markers}/$id.$1"`,
      'if [ "$2" = rootfs ]; then echo "$1 $status" > "$bundle/rootfs/hook-$1"; fi',
      '',
    ].join('\n'),
    { mode: 0o755 },
  );
  const hookEnv = ['PATH=/usr/sbin:/usr/bin:/sbin:/bin'];

  world.pods.runtimeToml = [`hooks_dirs = ["${hooksUsr}", "${hooksEtc}"]`];
  world.pods.extraToml = ['[cdi]', `spec_dirs = ["${etcCdi}", "${runCdi}"]`];

  /** The fixture spec of one version: one device `dev` using what that version allows. */
  function fixture(version: string): Record<string, unknown> {
    const t = tag(version);
    const at = (v: string) => VERSIONS.indexOf(version as (typeof VERSIONS)[number]) >= VERSIONS.indexOf(v as (typeof VERSIONS)[number]);
    const node = at('0.5.0')
      ? { path: `/dev/cdi-${t}`, hostPath: '/dev/null' } // type and numbers from the host node
      : { path: `/dev/cdi-${t}`, type: 'c', major: 1, minor: 3 };
    const mount = { hostPath: share, containerPath: `/cdi/${t}`, options: ['ro', 'rbind'], ...(at('0.4.0') ? { type: 'bind' } : {}) };
    return {
      cdiVersion: version,
      kind: `${VENDOR}/${t}`,
      ...(at('0.6.0') ? { annotations: { [`${VENDOR}/fixture`]: t } } : {}),
      containerEdits: { env: [`CDI_SPEC_${t.toUpperCase()}=spec`] },
      devices: [
        {
          name: 'dev',
          containerEdits: {
            env: [`CDI_${t.toUpperCase()}=dev`],
            deviceNodes: [node],
            mounts: [mount],
            hooks: [{ hookName: 'createContainer', path: hookScript, args: [hookScript, t, 'rootfs'], env: hookEnv }],
            ...(at('0.7.0') ? { additionalGids: [4242] } : {}),
          },
        },
      ],
    };
  }

  /** JSON for some versions, YAML (the same data, block style) for others. */
  function writeFixture(path: string, spec: Record<string, unknown>, yaml: boolean) {
    return writeFile(path, yaml ? toYaml(spec) : JSON.stringify(spec, null, 2));
  }

  containerSuite(world, 'CDI and OCI hook tests', {
    scope: 'pods',
    setup: async () => {
      for (const [i, v] of VERSIONS.entries()) await writeFixture(join(etcCdi, `${tag(v)}.${i % 2 ? 'yaml' : 'json'}`), fixture(v), i % 2 === 1);
    },
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** Runs `sh -c script` in the container; its stdout. */
  async function sh(id: string, script: string): Promise<string> {
    const r = await world.exec(id, ['sh', '-c', script]);
    assert.equal(r.exitCode, 0, `${script}: ${r.stderr}`);
    return r.stdout;
  }

  /** What a container of a device of fixture version `t` must see. */
  async function assertDevice(id: string, t: string) {
    assert.equal((await sh(id, `stat -c '%F %t:%T' /dev/cdi-${t}`)).trim(), 'character special file 1:3');
    const env = await sh(id, 'env');
    assert.match(env, new RegExp(`^CDI_${t.toUpperCase()}=dev$`, 'm'));
    assert.match(env, new RegExp(`^CDI_SPEC_${t.toUpperCase()}=spec$`, 'm'));
    assert.equal(await sh(id, `cat /cdi/${t}/hello`), 'hello from the host\n');
    assert.equal(await sh(id, `cat /hook-${t}`), `${t} creating\n`, 'the createContainer hook wrote into the root filesystem');
  }

  it('injects devices of every spec version from CDI_devices, checked from inside the container', async () => {
    const pod = await world.pod();
    const devices = VERSIONS.map((v) => ({ name: `${VENDOR}/${tag(v)}=dev` }));
    const id = await world.run(pod, world.config('sleeper', { CDIDevices: devices }));
    for (const v of VERSIONS) await assertDevice(id, tag(v));
    // 0.7.0 and later add a supplementary group.
    assert.match(await sh(id, 'cat /proc/self/status'), /^Groups:.*\b4242\b/m);
    const { status } = await world.status(id);
    assert.ok(status!.user!.linux!.supplementalGroups.includes(4242n), 'ContainerStatus reports the group');
    const info = await world.info(id);
    assert.deepEqual((info as unknown as { cdiDevices: string[] }).cdiDevices, devices.map((d) => d.name));
    assert.equal(info.runtimeSpec.hooks.createContainer.length, VERSIONS.length);
  });

  it('injects a device named by a cdi.k8s.io annotation', async () => {
    const pod = await world.pod();
    const id = await world.run(pod, world.config('sleeper', { annotations: { 'cdi.k8s.io/stove-test_dev': `${VENDOR}/v100=dev` } }));
    await assertDevice(id, 'v100');
    assert.equal((await world.exec(id, ['test', '-e', '/dev/cdi-v030'])).exitCode, 1, 'only the device asked for');
    assert.deepEqual((await world.info(id) as unknown as { cdiDevices: string[] }).cdiDevices, [`${VENDOR}/v100=dev`]);
  });

  it('refuses an unknown device with INVALID_ARGUMENT naming it, leaving nothing behind', async () => {
    const pod = await world.pod();
    await rejectsWith(
      world.create(pod, world.config('sleeper', { CDIDevices: [{ name: `${VENDOR}/v100=dev` }, { name: 'vendor.com/x=y' }] })),
      'INVALID_ARGUMENT',
      /unresolvable CDI devices vendor\.com\/x=y$/,
    );
    await rejectsWith(world.create(pod, world.config('sleeper', { CDIDevices: [{ name: 'gpu0' }] })), 'INVALID_ARGUMENT', /unqualified device "gpu0"/);
    const { containers } = await world.daemon.clients.runtime.listContainers({ filter: undefined });
    assert.equal(containers.length, 0);
    // The suite then checks that no record, dir, mount, runtime container or conmon is left.
  });

  // runc 1.4+ moves a host interface into the container (runtime-spec 1.3 `linux.netDevices`); runc
  // 1.1.5 cannot, so the same request is refused with the device and the field named.
  it('moves a 1.1.0 device\'s netDevices into the container where the runtime can, refuses it clearly where it cannot, leaving nothing behind', async () => {
    const path = join(etcCdi, 'nic.json');
    const spec = {
      cdiVersion: '1.1.0',
      kind: `${VENDOR}/nic`,
      devices: [{ name: 'vf0', containerEdits: { env: ['NIC=vf0'], netDevices: [{ hostInterfaceName: 'stovevf0', name: 'net1' }] } }],
    };
    await writeFile(path, JSON.stringify(spec));
    const canMove = (await testRuntimeFeatures())?.linux?.netDevices?.enabled === true;
    try {
      const pod = await world.pod();
      const request = world.config('sleeper', { CDIDevices: [{ name: `${VENDOR}/v110=dev` }, { name: `${VENDOR}/nic=vf0` }] });
      if (!canMove) {
        await rejectsWith(
          world.create(pod, request),
          'FAILED_PRECONDITION',
          new RegExp(`CDI device "${VENDOR}/nic=vf0" needs netDevices \\(host interface "stovevf0" as "net1"\\), which the OCI runtime \\S*runc does not`),
        );
        const { containers } = await world.daemon.clients.runtime.listContainers({ filter: undefined });
        assert.equal(containers.length, 0);
        return;
      }
      // A veth pair on the host: its stovevf0 end goes into the container as net1.
      await execa('ip', ['link', 'add', 'stovevf0', 'type', 'veth', 'peer', 'name', 'stovevf0p']);
      const id = await world.run(pod, request);
      assert.match(await sh(id, 'env'), /^NIC=vf0$/m);
      assert.match(await sh(id, 'cat /proc/net/dev'), /^\s*net1:/m);
      const host = await execa('ip', ['-o', 'link', 'show'], { reject: false });
      assert.doesNotMatch(host.stdout, /\bstovevf0:/, 'the interface left the host');
      await world.removeAll();
      // The pod's network namespace is gone with the pod, and the veth with it (both ends).
      const after = await execa('ip', ['-o', 'link', 'show'], { reject: false });
      assert.doesNotMatch(after.stdout, /\bstovevf0p?[:@]/);
    } finally {
      await rm(path, { force: true });
      await execa('ip', ['link', 'del', 'stovevf0'], { reject: false });
      await execa('ip', ['link', 'del', 'stovevf0p'], { reject: false });
    }
  });

  it('honours a spec written after the daemon started, from a dir that did not exist', async () => {
    const pod = await world.pod();
    const late = `${VENDOR}/late=gpu`;
    await rejectsWith(world.create(pod, world.config('sleeper', { CDIDevices: [{ name: late }] })), 'INVALID_ARGUMENT', /unresolvable CDI devices/);
    const spec = { cdiVersion: '0.6.0', kind: `${VENDOR}/late`, devices: [{ name: 'gpu', containerEdits: { env: ['LATE=1'], deviceNodes: [{ path: '/dev/late0', hostPath: '/dev/null' }] } }] };
    try {
      mkdirSync(runCdi, { mode: 0o755 });
      await writeFile(join(runCdi, 'late.json'), JSON.stringify(spec));
      const id = await world.run(pod, world.config('sleeper', { CDIDevices: [{ name: late }] }));
      assert.match(await sh(id, 'env'), /^LATE=1$/m);
      assert.equal((await sh(id, "stat -c '%F' /dev/late0")).trim(), 'character special file');
      // The later dir overrides a device of the earlier one.
      await writeFile(join(runCdi, 'v100.json'), JSON.stringify({ ...fixture('1.0.0'), containerEdits: { env: ['CDI_SPEC_V100=override'] } }));
      const other = await world.run(pod, world.config('sleeper', { CDIDevices: [{ name: `${VENDOR}/v100=dev` }] }));
      assert.match(await sh(other, 'env'), /^CDI_SPEC_V100=override$/m);
    } finally {
      await rm(runCdi, { recursive: true, force: true });
    }
  });

  it('skips a broken spec beside a good one; stove check lists devices and the rejected file with why', async () => {
    const broken = join(etcCdi, 'broken.yaml');
    const tooNew = join(etcCdi, 'too-new.json');
    try {
      await writeFile(broken, 'cdiVersion: "0.6.0"\nkind: [unclosed\n');
      await writeFile(tooNew, JSON.stringify({ ...fixture('0.3.0'), kind: `${VENDOR}/toonew`, annotations: { a: 'b' } }));
      const pod = await world.pod();
      const id = await world.run(pod, world.config('sleeper', { CDIDevices: [{ name: `${VENDOR}/v050=dev` }] }));
      await assertDevice(id, 'v050');
      await rejectsWith(world.create(pod, world.config('sleeper', { CDIDevices: [{ name: `${VENDOR}/toonew=dev` }] })), 'INVALID_ARGUMENT', /unresolvable CDI devices/);
      assert.match(world.daemon.output(), /"msg":"CDI spec file skipped"[^\n]*broken\.yaml/);

      const check = await runStoveCli(['check', '--config', world.daemon.configPath, '--config-dir', world.daemon.configDir]);
      for (const v of VERSIONS) assert.match(check.stdout, new RegExp(`device +${VENDOR}/${tag(v)}=dev`));
      assert.match(check.stdout, new RegExp(`rejected ${broken}: not valid JSON or YAML`));
      assert.match(check.stdout, new RegExp(`rejected ${tooNew}: cdiVersion 0\\.3\\.0 is too old for annotations: it needs at least 0\\.6\\.0`));
      assert.match(check.stdout, new RegExp(`^warn +cdi +${VERSIONS.length} device\\(s\\) from ${VERSIONS.length} spec file\\(s\\)`, 'm'));
    } finally {
      await rm(broken, { force: true });
      await rm(tooNew, { force: true });
    }
  });

  describe('OCI hooks', () => {
    before(async () => {
      const hookFile = (label: string, when: Record<string, unknown>, stages: string[]) =>
        JSON.stringify({ version: '1.0.0', hook: { path: hookScript, args: [hookScript, label], env: hookEnv }, when, stages });
      await writeFile(join(hooksUsr, '10-traced.json'), hookFile('traced', { annotations: { [`^${VENDOR.replaceAll('.', '\\.')}/trace$`]: '^on$' } }, ['prestart']));
      // Masked by the file of the same name in the later dir.
      await writeFile(join(hooksUsr, '20-sleepers.json'), hookFile('masked', { always: true }, ['createRuntime']));
      await writeFile(join(hooksEtc, '20-sleepers.json'), hookFile('sleeper', { commands: ['^sleep$'] }, ['poststart', 'poststop']));
    });

    const marker = (id: string, label: string) => readFile(join(markers, `${id}.${label}`), 'utf8').catch(() => undefined);

    it('runs a hook selected by annotation at createRuntime (from prestart), and not for others', async () => {
      const pod = await world.pod();
      const traced = await world.create(pod, world.config('busybox', { command: ['true'], annotations: { [`${VENDOR}/trace`]: 'on' } }));
      const plain = await world.create(pod, world.config('busybox', { command: ['true'], annotations: { [`${VENDOR}/trace`]: 'off' } }));
      assert.equal(await marker(traced, 'traced'), 'traced creating\n');
      assert.equal(await marker(plain, 'traced'), undefined);
      assert.equal(await marker(traced, 'masked'), undefined, 'the earlier dir\'s file of the same name is masked');
      assert.deepEqual((await world.info(traced) as unknown as { ociHooks: string[] }).ociHooks, [join(hooksUsr, '10-traced.json')]);
    });

    it('runs a hook selected by command at poststart and poststop', async () => {
      const pod = await world.pod();
      const id = await world.create(pod, world.config('sleeper'));
      const other = await world.create(pod, world.config('busybox', { command: ['true'] }));
      const { hooks } = (await world.info(id)).runtimeSpec;
      assert.deepEqual(Object.keys(hooks).sort(), ['poststart', 'poststop']);
      await world.daemon.clients.runtime.startContainer({ containerId: id });
      // runc before 1.2 runs poststart hooks at `runc create` already (state "created"); later ones
      // after the start ("running").
      assert.match((await marker(id, 'sleeper')) ?? '', /^sleeper (created|running)\n$/);
      await rm(join(markers, `${id}.sleeper`));
      await world.daemon.clients.runtime.stopContainer({ containerId: id, timeout: 0n });
      assert.equal(await marker(id, 'sleeper'), undefined, 'poststop runs when the runtime deletes the container');
      await world.daemon.clients.runtime.removeContainer({ containerId: id });
      assert.equal(await marker(id, 'sleeper'), 'sleeper stopped\n');
      assert.equal(await marker(other, 'sleeper'), undefined, 'the command does not match');
      assert.equal((await world.info(other)).runtimeSpec.hooks, undefined);
    });
  });
});

/** A small YAML writer for the fixtures (block maps and lists, quoted strings). */
function toYaml(value: unknown, indent = ''): string {
  if (Array.isArray(value)) {
    return value.map((v) => `${indent}-${isScalar(v) ? ' ' + scalar(v) + '\n' : '\n' + toYaml(v, indent + '  ')}`).join('');
  }
  return Object.entries(value as Record<string, unknown>)
    .map(([k, v]) => `${indent}${JSON.stringify(k)}:${isScalar(v) ? ' ' + scalar(v) + '\n' : '\n' + toYaml(v, indent + '  ')}`)
    .join('');
}
const isScalar = (v: unknown) => v === null || typeof v !== 'object';
const scalar = (v: unknown) => JSON.stringify(v);
