/**
 * The NRI adjustments that go to the OCI runtime as they are (I/O priority, scheduling policy, network
 * devices, RDT settings): what the runtime's features document says it does, the merge of several
 * plugins' answers (ownership, removal, name collisions), hostile values, the refusal where the runtime
 * lacks a field, the OCI spec they become, and the container plugins are shown from a spec.
 */
import assert from 'node:assert/strict';
import { execa } from 'execa';
import {
  Container,
  ContainerAdjustment,
  ContainerState,
  CreateContainerResponse,
  Field,
  IOPrioClass,
  LinuxSchedulerFlag,
  LinuxSchedulerPolicy,
  type DeepPartial,
  type LinuxContainerAdjustment,
} from '../../../src/gen/nri/api.js';
import { runtimeSupportFrom } from '../../../src/cdi/index.js';
import { runc15Path } from '../../helpers/oci-runtime.js';
import { specToNri } from '../../../src/nri/convert.js';
import { CreateResult, PluginConflictError } from '../../../src/nri/result.js';
import { applyAdjustment, type AdjustHost } from '../../../src/nri/spec-adjust.js';
import type { Spec } from '../../../src/oci/index.js';

/** runc 1.5.3's `runc features`, the parts read here (the whole document is longer). */
const RUNC15 = runtimeSupportFrom('/opt/runc-1.5/runc', {
  ociVersionMax: '1.3.0',
  linux: { netDevices: { enabled: true }, intelRdt: { enabled: true, schemata: true, monitoring: true }, namespaces: ['network'] },
});
/** Debian 12's runc 1.1.5: no netDevices nor intelRdt section, ociVersionMax 1.0.2-dev. */
const RUNC11 = runtimeSupportFrom('/usr/bin/runc', { ociVersionMax: '1.0.2-dev', linux: { namespaces: ['network'], seccomp: { enabled: true } } });

const ctr = () => Container.fromPartial({ id: 'c1', linux: { netDevices: {} } });
const answer = (linux: DeepPartial<LinuxContainerAdjustment>) => CreateContainerResponse.fromPartial({ adjust: { linux } });
const refusal = (re: RegExp, code: 'InvalidArgument' | 'FailedPrecondition') => (err: unknown) => {
  assert.ok(err instanceof PluginConflictError, String(err));
  assert.match(err.message, re);
  assert.equal(err.code, code);
  return true;
};

describe('nri: runtime support of the fields newer than runtime-spec 1.0.2', () => {
  it('reads runc 1.5, runc 1.1.5, a crun without features, and a runtime-spec 1.1 runtime', () => {
    const pick = ({ ociVersionMax, netDevices, intelRdt, intelRdtSchemata, intelRdtMonitoring, ioPriority, scheduler }: typeof RUNC15) => ({
      ociVersionMax,
      netDevices,
      intelRdt,
      intelRdtSchemata,
      intelRdtMonitoring,
      ioPriority,
      scheduler,
    });
    assert.deepEqual(pick(RUNC15), { ociVersionMax: '1.3.0', netDevices: true, intelRdt: true, intelRdtSchemata: true, intelRdtMonitoring: true, ioPriority: true, scheduler: true });
    assert.deepEqual(pick(RUNC11), { ociVersionMax: '1.0.2-dev', netDevices: false, intelRdt: false, intelRdtSchemata: false, intelRdtMonitoring: false, ioPriority: false, scheduler: false });
    assert.deepEqual(pick(runtimeSupportFrom('/usr/bin/crun', undefined)), { ociVersionMax: '', netDevices: false, intelRdt: false, intelRdtSchemata: false, intelRdtMonitoring: false, ioPriority: false, scheduler: false });
    // runc 1.2's document: intelRdt without schemata/monitoring, ociVersionMax 1.2.0.
    const v12 = runtimeSupportFrom('runc-1.2', { ociVersionMax: '1.2.0', linux: { intelRdt: { enabled: true } } });
    assert.deepEqual([v12.ioPriority, v12.scheduler, v12.intelRdt, v12.intelRdtSchemata, v12.netDevices], [true, true, true, false, false]);
    assert.equal(runtimeSupportFrom('crun', { ociVersionMax: '1.1.0+dev' }).scheduler, true);
    for (const bogus of ['1.0.9', '2', 'x.y.z', '', 11 as unknown as string]) assert.equal(runtimeSupportFrom('r', { ociVersionMax: bogus }).ioPriority, false, String(bogus));
  });

  it("reads the features documents of this machine's runc 1.5 and Debian's runc 1.1.5, when they are there", async function () {
    const features = async (binary: string) => {
      const r = await execa(binary, ['features'], { reject: false });
      return r.exitCode === 0 ? runtimeSupportFrom(binary, JSON.parse(r.stdout) as never) : undefined;
    };
    const runc15 = runc15Path();
    const [v15, v11] = [runc15 ? await features(runc15) : undefined, await features('/usr/bin/runc')];
    if (!v15 && !v11) this.skip();
    if (v15) assert.ok(v15.ioPriority && v15.scheduler && v15.netDevices && v15.intelRdt && v15.intelRdtSchemata && v15.intelRdtMonitoring, JSON.stringify(v15));
    if (v11) assert.ok(!v11.ioPriority && !v11.scheduler && !v11.netDevices && !v11.intelRdt, JSON.stringify(v11));
  });
});

describe('nri: merging I/O priority, scheduler, network device and RDT adjustments', () => {
  it('takes each from its plugin, shows the next plugin, and names the owners for validators', () => {
    const r = new CreateResult(ctr(), RUNC15);
    r.apply(answer({ ioPriority: { class: IOPrioClass.IOPRIO_CLASS_BE, priority: 6 }, netDevices: { veth1: { name: 'net1' } } }), '10-a');
    r.apply(
      answer({
        scheduler: { policy: LinuxSchedulerPolicy.SCHED_BATCH, nice: 7, flags: [LinuxSchedulerFlag.SCHED_FLAG_RESET_ON_FORK] },
        netDevices: { veth2: { name: '' } },
        rdt: { closId: { value: 'gold' }, schemata: { value: ['L3:0=f', 'MB:0=50'] }, enableMonitoring: { value: true } },
      }),
      '20-b',
    );
    const a = r.adjust.linux!;
    assert.deepEqual(a.ioPriority, { class: IOPrioClass.IOPRIO_CLASS_BE, priority: 6 });
    assert.equal(a.scheduler?.nice, 7);
    assert.deepEqual(a.netDevices, { veth1: { name: 'net1' }, veth2: { name: '' } });
    assert.deepEqual(a.rdt, { closId: { value: 'gold' }, schemata: { value: ['L3:0=f', 'MB:0=50'] }, enableMonitoring: { value: true }, remove: false });
    assert.deepEqual(r.container.linux!.ioPriority, { class: IOPrioClass.IOPRIO_CLASS_BE, priority: 6 });
    assert.deepEqual(Object.keys(r.container.linux!.netDevices), ['veth1', 'veth2']);
    const owners = r.owningPlugins.owners.c1!;
    assert.equal(owners.simple[Field.IoPriority], '10-a');
    assert.equal(owners.simple[Field.LinuxSched], '20-b');
    assert.equal(owners.simple[Field.RdtClosID], '20-b');
    assert.equal(owners.simple[Field.RdtSchemata], '20-b');
    assert.equal(owners.simple[Field.RdtEnableMonitoring], '20-b');
    assert.deepEqual(owners.compound[Field.LinuxNetDevices]?.owners, { veth1: '10-a', veth2: '20-b' });
  });

  for (const [what, first, second] of [
    ['I/O priority', { ioPriority: { class: 2, priority: 1 } }, { ioPriority: { class: 3, priority: 7 } }],
    ['scheduling policy', { scheduler: { policy: 4 } }, { scheduler: { policy: 6 } }],
    ['network device veth1', { netDevices: { veth1: { name: 'a' } } }, { netDevices: { veth1: { name: 'b' } } }],
    ['RDT CLOS ID', { rdt: { closId: { value: 'a' } } }, { rdt: { closId: { value: 'b' } } }],
    ['RDT schemata', { rdt: { schemata: { value: ['L3:0=1'] } } }, { rdt: { schemata: { value: ['L3:0=3'] } } }],
    ['RDT monitoring', { rdt: { enableMonitoring: { value: true } } }, { rdt: { enableMonitoring: { value: false } } }],
  ] as const) {
    it(`refuses two plugins setting ${what}, naming both`, () => {
      const r = new CreateResult(ctr(), RUNC15);
      r.apply(answer(first as never), '10-first');
      assert.throws(() => r.apply(answer(second as never), '20-second'), refusal(new RegExp(`^plugins "20-second" and "10-first" both tried to set ${what}$`), 'InvalidArgument'));
    });
  }

  it('lets a plugin remove a network device or the RDT settings an earlier one set, and another set them again', () => {
    const r = new CreateResult(ctr(), RUNC15);
    r.apply(answer({ netDevices: { veth1: { name: 'net1' } }, rdt: { closId: { value: 'gold' }, schemata: { value: ['L3:0=f'] } } }), '10-a');
    r.apply(answer({ netDevices: { '-veth1': { name: '' } }, rdt: { remove: true } }), '20-b');
    assert.deepEqual(r.adjust.linux!.netDevices, { '-veth1': { name: '' } });
    assert.deepEqual(r.adjust.linux!.rdt, { closId: undefined, schemata: undefined, enableMonitoring: undefined, remove: true });
    assert.deepEqual(r.container.linux!.netDevices, {});
    assert.equal(r.container.linux!.rdt, undefined);
    r.apply(answer({ netDevices: { veth1: { name: 'net9' } }, rdt: { closId: { value: 'silver' } } }), '30-c');
    assert.deepEqual(r.adjust.linux!.netDevices, { veth1: { name: 'net9' } });
    // As NRI merges them: a field set after a removal keeps the removal from clearing the spec's settings.
    assert.deepEqual(r.adjust.linux!.rdt, { closId: { value: 'silver' }, schemata: undefined, enableMonitoring: undefined, remove: false });
  });

  it('takes SCHED_NONE as "no policy", which needs no runtime support', () => {
    const r = new CreateResult(ctr(), RUNC11);
    r.apply(answer({ scheduler: { policy: LinuxSchedulerPolicy.SCHED_NONE } }), '10-a');
    assert.equal(r.adjust.linux!.scheduler?.policy, LinuxSchedulerPolicy.SCHED_NONE);
    assert.equal(r.container.linux!.scheduler, undefined);
  });

  it('refuses two network devices that would have one name in the container, but not a %d template', () => {
    const r = new CreateResult(Container.fromPartial({ id: 'c1', linux: { netDevices: { ens1: { name: 'net0' } } } }), RUNC15);
    assert.throws(() => r.apply(answer({ netDevices: { veth1: { name: 'net0' } } }), '10-a'), refusal(/^network devices "ens1" and "veth1" would both be "net0" in the container \(set by plugin\(s\) "10-a"\)$/, 'InvalidArgument'));
    const r2 = new CreateResult(ctr(), RUNC15);
    r2.apply(answer({ netDevices: { veth1: { name: 'veth2' } } }), '10-a');
    assert.throws(() => r2.apply(answer({ netDevices: { veth2: { name: '' } } }), '20-b'), /network devices "veth1" and "veth2" would both be "veth2" in the container \(set by plugin\(s\) "10-a" and "20-b"\)/);
    const r3 = new CreateResult(ctr(), RUNC15);
    r3.apply(answer({ netDevices: { veth1: { name: 'net%d' }, veth2: { name: 'net%d' } } }), '10-a');
    assert.equal(Object.keys(r3.adjust.linux!.netDevices).length, 2);
  });

  it('refuses what the runtime does not implement, naming the plugin, the field and the runtime', () => {
    for (const [linux, re] of [
      [{ ioPriority: { class: 2, priority: 4 } }, /^plugin "10-a" asked for an I\/O priority \(IOPRIO_CLASS_BE 4, process\.ioPriority\), which the OCI runtime \/usr\/bin\/runc does not \(its "features" gives ociVersionMax 1\.0\.2-dev, before 1\.1\.0; process\.ioPriority: runtime-spec 1\.1, runc >= 1\.2/],
      [{ scheduler: { policy: 4, nice: 5 } }, /^plugin "10-a" asked for a scheduling policy \(SCHED_BATCH nice 5, process\.scheduler\), which the OCI runtime \/usr\/bin\/runc does not/],
      [{ netDevices: { veth1: { name: 'net1' } } }, /^plugin "10-a" asked for network device "veth1" as "net1" \(linux\.netDevices\), which the OCI runtime \/usr\/bin\/runc does not \(its "features" lists no linux\.netDevices; linux\.netDevices: runtime-spec 1\.3, runc >= 1\.4\)$/],
      [{ rdt: { closId: { value: 'gold' } } }, /^plugin "10-a" asked for RDT settings \(closID "gold", linux\.intelRdt\), which the OCI runtime \/usr\/bin\/runc does not \(its "features" lists no linux\.intelRdt;/],
    ] as const) {
      assert.throws(() => new CreateResult(ctr(), RUNC11).apply(answer(linux as never), '10-a'), refusal(re, 'FailedPrecondition'));
    }
    assert.throws(() => new CreateResult(ctr(), RUNC11).apply(answer({ resources: { rdtClass: { value: 'gold' } } }), '10-a'), refusal(/^plugin "10-a" asked for RDT class "gold" \(linux\.intelRdt\.closID\), which the OCI runtime \/usr\/bin\/runc does not \(its "features" lists no linux\.intelRdt;/, 'FailedPrecondition'));
    new CreateResult(ctr(), RUNC11).apply(answer({ resources: { rdtClass: { value: '' } } }), '10-a');
    // runc 1.2: RDT, but neither schemata nor monitoring.
    const v12 = runtimeSupportFrom('runc-1.2', { ociVersionMax: '1.2.0', linux: { intelRdt: { enabled: true } } });
    new CreateResult(ctr(), v12).apply(answer({ rdt: { closId: { value: 'gold' }, enableMonitoring: { value: false } } }), '10-a');
    assert.throws(() => new CreateResult(ctr(), v12).apply(answer({ rdt: { schemata: { value: ['L3:0=f'] } } }), '10-a'), refusal(/lists no linux\.intelRdt\.schemata/, 'FailedPrecondition'));
    assert.throws(() => new CreateResult(ctr(), v12).apply(answer({ rdt: { enableMonitoring: { value: true } } }), '10-a'), refusal(/lists no linux\.intelRdt\.monitoring/, 'FailedPrecondition'));
    // A runtime not known, and crun without a features command.
    assert.throws(() => new CreateResult(ctr()).apply(answer({ ioPriority: { class: 1, priority: 0 } }), '10-a'), refusal(/which the OCI runtime may not do: it is not known here/, 'FailedPrecondition'));
    assert.throws(() => new CreateResult(ctr(), runtimeSupportFrom('/usr/bin/crun', undefined)).apply(answer({ scheduler: { policy: 6 } }), '10-a'), refusal(/the OCI runtime \/usr\/bin\/crun does not \(it has no "features" document/, 'FailedPrecondition'));
    // Removing needs nothing of the runtime.
    new CreateResult(ctr(), RUNC11).apply(answer({ netDevices: { '-veth1': { name: '' } }, rdt: { remove: true } }), '10-a');
  });

  const long = (n: number) => 'x'.repeat(n);
  for (const [linux, re] of [
    [{ ioPriority: { class: IOPrioClass.IOPRIO_CLASS_NONE, priority: 0 } }, /invalid I\/O priority \(linux\.io_priority\): class IOPRIO_CLASS_NONE is none of IOPRIO_CLASS_RT, IOPRIO_CLASS_BE, IOPRIO_CLASS_IDLE/],
    [{ ioPriority: { class: 9, priority: 0 } }, /class 9 is none of/],
    [{ ioPriority: { class: 2, priority: 8 } }, /priority 8 is outside 0 \(highest\) to 7 \(lowest\)/],
    [{ ioPriority: { class: 2, priority: -1 } }, /priority -1 is outside/],
    [{ scheduler: { policy: 5 } }, /invalid scheduling policy \(linux\.scheduler\): policy SCHED_ISO is not implemented by Linux/],
    [{ scheduler: { policy: 42 } }, /policy 42 is unknown/],
    [{ scheduler: { policy: 1, nice: 20 } }, /nice 20 is outside -20 to 19/],
    [{ scheduler: { policy: 1, nice: -21 } }, /nice -21 is outside/],
    [{ scheduler: { policy: 2, priority: 0 } }, /priority 0 is outside 1 to 99 \(SCHED_FIFO\)/],
    [{ scheduler: { policy: 3, priority: 100 } }, /priority 100 is outside 1 to 99 \(SCHED_RR\)/],
    [{ scheduler: { policy: 4, priority: 5 } }, /priority 5 is only for SCHED_FIFO and SCHED_RR, not SCHED_BATCH/],
    [{ scheduler: { policy: 1, flags: [17] } }, /flag 17 is unknown/],
    [{ scheduler: { policy: 1, flags: Array<number>(8).fill(0) } }, /8 flags \(at most 7\)/],
    [{ scheduler: { policy: 1, runtime: 5n } }, /runtime, deadline and period are only for SCHED_DEADLINE, not SCHED_OTHER/],
    [{ scheduler: { policy: 7, runtime: 100n, deadline: 1000n } }, /runtime 100 ns is below 1024 ns/],
    [{ scheduler: { policy: 7, runtime: 2000n, deadline: 1000n } }, /deadline 1000 ns is below runtime 2000 ns/],
    [{ scheduler: { policy: 7, runtime: 2000n, deadline: 3000n, period: 2500n } }, /period 2500 ns is below deadline 3000 ns/],
    [{ scheduler: { policy: 7, runtime: 2000n, deadline: 1n << 63n } }, /below 2\^63 ns/],
    [{ netDevices: { '': { name: 'x' } } }, /invalid network device \(linux\.net_devices ""\): an empty interface name/],
    [{ netDevices: { [long(16)]: { name: '' } } }, /is longer than 15 bytes/],
    [{ netDevices: { veth1: { name: 'a/b' } } }, /"a\/b" holds a character interface names cannot have/],
    [{ netDevices: { veth1: { name: 'a b' } } }, /"a b" holds a character/],
    [{ netDevices: { veth1: { name: 'a:1' } } }, /holds a character/],
    [{ netDevices: { 'vé': { name: '' } } }, /not printable ASCII/],
    [{ netDevices: { veth1: { name: '..' } } }, /interface name ".." is not allowed/],
    [{ netDevices: { lo: { name: 'lo2' } } }, /"lo" is the loopback interface/],
    [{ netDevices: { veth1: { name: 'lo' } } }, /"lo" is the loopback interface/],
    [{ netDevices: { 'eth%d': { name: '' } } }, /holds '%' other than one "%d" template/],
    [{ netDevices: { veth1: { name: 'n%d%d' } } }, /holds '%' other than one "%d" template/],
    [{ netDevices: { veth1: { name: 'n%s' } } }, /holds '%'/],
    [{ netDevices: Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`v${i}`, { name: '' }])) }, /33 network devices \(at most 32\)/],
    [{ rdt: { closId: { value: '..' } } }, /invalid RDT settings \(linux\.rdt\): closID "\.\." is not a resctrl group name/],
    [{ rdt: { closId: { value: 'a/b' } } }, /closID "a\/b" is not a resctrl group name/],
    [{ resources: { rdtClass: { value: '../x' } } }, /invalid RDT class \(linux\.resources\.rdt_class\): class "\.\.\/x" is not a resctrl group name/],
    [{ rdt: { closId: { value: 'a\nb' } } }, /is not a resctrl group name/],
    [{ rdt: { closId: { value: long(256) } } }, /is longer than 255 bytes/],
    [{ rdt: { schemata: { value: Array<string>(33).fill('L3:0=f') } } }, /33 schemata lines \(at most 32\)/],
    [{ rdt: { schemata: { value: ['L3:0=f', long(4097)] } } }, /schemata line 2 is longer than 4096 bytes/],
    [{ rdt: { schemata: { value: ['L3:0=f\nMB:0=1'] } } }, /schemata line 1 holds a newline/],
    [{ rdt: { schemata: { value: [' '] } } }, /schemata line 1 is empty/],
  ] as const) {
    it(`refuses a hostile value: ${re.source.slice(0, 70)}`, () => {
      assert.throws(() => new CreateResult(ctr(), RUNC15).apply(answer(linux as never), '10-a'), refusal(new RegExp(`^plugin "10-a" asked for .*${re.source}`), 'InvalidArgument'));
    });
  }

  it('accepts the edges: "/" as the default RDT group, SCHED_DEADLINE with period 0, nice -20, priority 99, IDLE 7', () => {
    const r = new CreateResult(ctr(), RUNC15);
    r.apply(answer({ rdt: { closId: { value: '/' } }, ioPriority: { class: IOPrioClass.IOPRIO_CLASS_IDLE, priority: 7 } }), '10-a');
    for (const s of [
      { policy: 7, runtime: 1024n, deadline: 1024n },
      { policy: 1, nice: -20 },
      { policy: 2, priority: 99 },
    ]) {
      new CreateResult(ctr(), RUNC15).apply(answer({ scheduler: s }), '10-a');
    }
  });
});

describe('nri: I/O priority, scheduler, network devices and RDT in the OCI spec', () => {
  const spec = (): Spec => ({
    ociVersion: '1.0.2',
    process: { user: { uid: 0, gid: 0 }, args: ['sh'], cwd: '/' },
    linux: { namespaces: [{ type: 'network', path: '/var/run/netns/pod' }], intelRdt: { closID: 'from-cdi', l3CacheSchema: 'L3:0=1' } },
  });
  const host = (resctrl = true, warnings: string[] = []): AdjustHost => ({
    cgroups: { cgroupV2: false, swapControllerAvailable: true, hugetlbControllerAvailable: true },
    resctrlMounted: async () => resctrl,
    warn: (m) => warnings.push(m),
  });
  const adjust = (linux: DeepPartial<LinuxContainerAdjustment>) => ContainerAdjustment.fromPartial({ linux });

  it('writes process.ioPriority, process.scheduler, linux.netDevices and linux.intelRdt as runtime-spec names them', async () => {
    const s = spec();
    await applyAdjustment(
      s,
      adjust({
        ioPriority: { class: IOPrioClass.IOPRIO_CLASS_BE, priority: 6 },
        scheduler: { policy: LinuxSchedulerPolicy.SCHED_DEADLINE, runtime: 10_000_000n, deadline: 30_000_000n, period: 1n << 60n, flags: [LinuxSchedulerFlag.SCHED_FLAG_RESET_ON_FORK, LinuxSchedulerFlag.SCHED_FLAG_DL_OVERRUN] },
        netDevices: { veth1: { name: 'net1' }, veth2: { name: '' } },
        rdt: { schemata: { value: ['L3:0=f', 'MB:0=50'] }, enableMonitoring: { value: true } },
      }),
      host(),
    );
    assert.deepEqual(s.process!.ioPriority, { class: 'IOPRIO_CLASS_BE', priority: 6 });
    assert.deepEqual(s.process!.scheduler, { policy: 'SCHED_DEADLINE', flags: ['SCHED_FLAG_RESET_ON_FORK', 'SCHED_FLAG_DL_OVERRUN'], runtime: 10_000_000, deadline: 30_000_000, period: 1n << 60n });
    assert.deepEqual(s.linux!.netDevices, { veth1: { name: 'net1' }, veth2: {} });
    // Settings lay over what the spec had (a CDI device's), field by field.
    assert.deepEqual(s.linux!.intelRdt, { closID: 'from-cdi', l3CacheSchema: 'L3:0=1', schemata: ['L3:0=f', 'MB:0=50'], enableMonitoring: true });
  });

  it('removes: SCHED_NONE the scheduler, -name a network device, remove the RDT settings (then sets what follows)', async () => {
    const s = spec();
    s.process!.scheduler = { policy: 'SCHED_BATCH', nice: 3 };
    s.linux!.netDevices = { veth1: { name: 'net1' } };
    await applyAdjustment(s, adjust({ scheduler: { policy: LinuxSchedulerPolicy.SCHED_NONE }, netDevices: { '-veth1': { name: '' } }, rdt: { remove: true } }), host());
    assert.equal(s.process!.scheduler, undefined);
    assert.equal(s.linux!.netDevices, undefined);
    assert.equal(s.linux!.intelRdt, undefined);
    const t = spec();
    await applyAdjustment(t, adjust({ rdt: { remove: true, closId: { value: 'gold' } } }), host());
    assert.deepEqual(t.linux!.intelRdt, { closID: 'gold' });
  });

  it('takes an RDT class as the resctrl group, replacing the spec\'s RDT settings, then lays the settings over it', async () => {
    const warnings: string[] = [];
    const s = spec();
    await applyAdjustment(s, adjust({ resources: { rdtClass: { value: 'gold' } }, rdt: { schemata: { value: ['L3:0=3'] } } }), host(true, warnings));
    assert.deepEqual(s.linux!.intelRdt, { closID: 'gold', schemata: ['L3:0=3'] });
    const t = spec();
    await applyAdjustment(t, adjust({ resources: { rdtClass: { value: 'gold' } }, rdt: { closId: { value: 'mine' } } }), host(true, warnings));
    assert.deepEqual(t.linux!.intelRdt, { closID: 'mine' });
    const u = spec();
    await applyAdjustment(u, adjust({ resources: { rdtClass: { value: '' } } }), host(false, warnings));
    assert.equal(u.linux!.intelRdt, undefined, 'an empty class clears');
    assert.deepEqual(warnings, []);
    await assert.rejects(applyAdjustment(spec(), adjust({ resources: { rdtClass: { value: 'gold' } } }), host(false)), /NRI plugins set RDT settings \(class "gold"\), which need the resctrl filesystem/);
  });

  it('refuses RDT settings without resctrl, network devices in a host-network container, and a collision with a device already there', async () => {
    await assert.rejects(applyAdjustment(spec(), adjust({ rdt: { closId: { value: 'gold' } } }), host(false)), (err: Error & { kind?: string }) => {
      assert.equal(err.kind, 'FailedPrecondition');
      assert.match(err.message, /^NRI plugins set RDT settings \(closID "gold"\), which need the resctrl filesystem \(\/sys\/fs\/resctrl\), and this host has none mounted$/);
      return true;
    });
    // Removing needs no resctrl.
    await applyAdjustment(spec(), adjust({ rdt: { remove: true } }), host(false));
    const hostNet = spec();
    hostNet.linux!.namespaces = [{ type: 'mount' }];
    await assert.rejects(applyAdjustment(hostNet, adjust({ netDevices: { veth1: { name: '' } } }), host()), (err: Error & { kind?: string }) => {
      assert.equal(err.kind, 'FailedPrecondition');
      assert.match(err.message, /network devices "veth1" need a network namespace of the pod's own; this container uses the host's network/);
      return true;
    });
    const withCdi = spec();
    withCdi.linux!.netDevices = { ens1: { name: 'net1' } };
    await assert.rejects(applyAdjustment(withCdi, adjust({ netDevices: { veth1: { name: 'net1' } } }), host()), /network devices "ens1" and "veth1" would both be "net1" in the container/);
  });

  it('shows plugins the spec as NRI containers carry it', () => {
    const s = spec();
    s.process!.ioPriority = { class: 'IOPRIO_CLASS_RT', priority: 2 };
    s.process!.scheduler = { policy: 'SCHED_RR', priority: 10, flags: ['SCHED_FLAG_RESET_ON_FORK'] };
    s.linux!.netDevices = { veth1: { name: 'net1' } };
    s.linux!.intelRdt = { closID: 'gold', schemata: ['L3:0=f'], enableMonitoring: true };
    const c = specToNri({ id: 'c1', sandboxId: 'p1', name: 'c', labels: {}, state: ContainerState.CONTAINER_CREATED, pid: 0, spec: s });
    assert.deepEqual(c.linux!.ioPriority, { class: IOPrioClass.IOPRIO_CLASS_RT, priority: 2 });
    assert.deepEqual(c.linux!.scheduler, { policy: LinuxSchedulerPolicy.SCHED_RR, nice: 0, priority: 10, flags: [LinuxSchedulerFlag.SCHED_FLAG_RESET_ON_FORK], runtime: 0n, deadline: 0n, period: 0n });
    assert.deepEqual(c.linux!.netDevices, { veth1: { name: 'net1' } });
    assert.deepEqual(c.linux!.rdt, { closId: { value: 'gold' }, schemata: { value: ['L3:0=f'] }, enableMonitoring: { value: true }, remove: false });
  });
});
