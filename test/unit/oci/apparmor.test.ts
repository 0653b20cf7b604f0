/**
 * AppArmor: which profile a container runs under (containerd's GenerateApparmorSpecOpts cases, with
 * Stove's default profile), the text of `stove-default`, and the parsers of the kernel's files.
 */
import assert from 'node:assert/strict';
import { SecurityProfile, SecurityProfile_ProfileType as T } from '../../../src/gen/runtime/v1/api.js';
import { parseConfig } from '../../../src/config/load.js';
import { defaultConfig } from '../../../src/config/schema.js';
import { daemonProfileFrom, isPlainProfileName, renderAppArmorProfile, STOVE_APPARMOR_PROFILE, type AppArmorProfileFacts } from '../../../src/oci/apparmor-profile.js';
import { selectAppArmor, type AppArmorChoice, type AppArmorHost } from '../../../src/oci/security.js';
import { appArmorModeIn } from '../../../src/platform/proc.js';
import { build, containerConfig, podConfig, testSettings } from './fixtures.js';
import { throwsKind } from './helpers.js';

const OFF: AppArmorHost = { enabled: false };
const STOVE: AppArmorHost = { enabled: true, defaultProfile: STOVE_APPARMOR_PROFILE, defaultIsStoves: true };
const CONFIGURED: AppArmorHost = { enabled: true, defaultProfile: 'site-default', defaultIsStoves: false };
const UNCONFINED_DEFAULT: AppArmorHost = { enabled: true };

const sp = (profileType: T, localhostRef = '') => SecurityProfile.fromPartial({ profileType, localhostRef });
const NONE: AppArmorChoice = { kind: 'none' };
const stoveDefault: AppArmorChoice = { kind: 'profile', name: STOVE_APPARMOR_PROFILE, source: 'stove-default' };
const localhost = (name: string): AppArmorChoice => ({ kind: 'profile', name, source: 'localhost' });

describe('selectAppArmor', () => {
  const cases: { name: string; profile?: SecurityProfile; deprecated?: string; privileged?: boolean; host: AppArmorHost; want: AppArmorChoice }[] = [
    // A host without AppArmor: nothing changes, as before Stove had a profile of its own.
    { name: 'no AppArmor, no profile: unconfined', host: OFF, want: NONE },
    { name: 'no AppArmor, Unconfined: unconfined', profile: sp(T.Unconfined), host: OFF, want: NONE },
    { name: 'no AppArmor, deprecated unconfined: unconfined', deprecated: 'unconfined', host: OFF, want: NONE },
    { name: 'no AppArmor, privileged without a profile: unconfined', privileged: true, host: OFF, want: NONE },
    // An AppArmor host with Stove's default.
    { name: 'no profile: stove-default (as containerd, kubernetes#51746)', host: STOVE, want: stoveDefault },
    { name: 'RuntimeDefault: stove-default', profile: sp(T.RuntimeDefault), host: STOVE, want: stoveDefault },
    { name: 'deprecated runtime/default: stove-default', deprecated: 'runtime/default', host: STOVE, want: stoveDefault },
    { name: 'privileged without a profile: unconfined', privileged: true, host: STOVE, want: NONE },
    { name: 'privileged RuntimeDefault: unconfined', profile: sp(T.RuntimeDefault), privileged: true, host: STOVE, want: NONE },
    { name: 'Unconfined: unconfined', profile: sp(T.Unconfined), host: STOVE, want: NONE },
    { name: 'deprecated unconfined: unconfined', deprecated: 'unconfined', host: STOVE, want: NONE },
    { name: 'Localhost: the profile, prefix trimmed', profile: sp(T.Localhost, 'localhost/my-profile'), host: STOVE, want: localhost('my-profile') },
    { name: 'Localhost without the prefix', profile: sp(T.Localhost, 'my-profile'), host: STOVE, want: localhost('my-profile') },
    { name: 'deprecated localhost/: the profile', deprecated: 'localhost/my-profile', host: STOVE, want: localhost('my-profile') },
    { name: 'privileged Localhost: the profile (as containerd)', profile: sp(T.Localhost, 'localhost/my-profile'), privileged: true, host: STOVE, want: localhost('my-profile') },
    { name: 'the field wins over the deprecated string', profile: sp(T.Localhost, 'localhost/new'), deprecated: 'localhost/old', host: STOVE, want: localhost('new') },
    { name: 'the field wins even when it says RuntimeDefault', profile: sp(T.RuntimeDefault), deprecated: 'localhost/old', host: STOVE, want: stoveDefault },
    // A configured default, and none.
    { name: 'configured default for no profile', host: CONFIGURED, want: { kind: 'profile', name: 'site-default', source: 'configured-default' } },
    { name: 'configured default for RuntimeDefault', profile: sp(T.RuntimeDefault), host: CONFIGURED, want: { kind: 'profile', name: 'site-default', source: 'configured-default' } },
    { name: 'default "unconfined": RuntimeDefault runs unconfined', profile: sp(T.RuntimeDefault), host: UNCONFINED_DEFAULT, want: NONE },
    { name: 'default "unconfined": Localhost still applies', profile: sp(T.Localhost, 'localhost/x'), host: UNCONFINED_DEFAULT, want: localhost('x') },
  ];
  for (const c of cases) {
    it(c.name, () => assert.deepEqual(selectAppArmor(c.profile, c.deprecated ?? '', c.privileged ?? false, c.host), c.want));
  }

  it('refuses profiles a host without AppArmor cannot apply (FailedPrecondition)', () => {
    for (const [profile, deprecated] of [[sp(T.RuntimeDefault), ''], [sp(T.Localhost, 'localhost/x'), ''], [undefined, 'runtime/default'], [undefined, 'localhost/x']] as const) {
      throwsKind(() => selectAppArmor(profile, deprecated, false, OFF), 'FailedPrecondition', /apparmor is not supported: AppArmor is not enabled on this host/);
    }
  });

  it('refuses malformed requests with InvalidArgument', () => {
    throwsKind(() => selectAppArmor(sp(T.RuntimeDefault, 'localhost/x'), '', false, STOVE), 'InvalidArgument', /localhost_ref must only be set when profile_type is Localhost/);
    throwsKind(() => selectAppArmor(sp(T.Localhost, ''), '', false, STOVE), 'InvalidArgument', /needs a localhost_ref/);
    throwsKind(() => selectAppArmor(sp(T.Localhost, 'localhost/'), '', false, STOVE), 'InvalidArgument', /needs a localhost_ref/);
    throwsKind(() => selectAppArmor(undefined, 'bogus', false, STOVE), 'InvalidArgument', /unknown apparmor profile "bogus"/);
    throwsKind(() => selectAppArmor(sp(T.Localhost, 'localhost/two words'), '', false, STOVE), 'InvalidArgument', /is not a profile name/);
    throwsKind(() => selectAppArmor(sp(T.Localhost, 'x\nstove-default (enforce)'), '', false, STOVE), 'InvalidArgument', /is not a profile name/);
    throwsKind(() => selectAppArmor(sp(T.Localhost, 'a'.repeat(4097)), '', false, STOVE), 'InvalidArgument', /is not a profile name/);
    throwsKind(() => selectAppArmor(sp(99 as T), '', false, STOVE), 'InvalidArgument', /unknown apparmor profile type 99/);
  });

  it('puts the choice into the spec', () => {
    const settings = testSettings({ apparmor: STOVE });
    assert.equal(build({ settings }).process!.apparmorProfile, STOVE_APPARMOR_PROFILE, 'a container that asks for nothing');
    const privileged = containerConfig({ linux: { securityContext: { privileged: true } } });
    assert.equal(build({ settings, config: privileged, pod: podConfig({ linux: { securityContext: { privileged: true } } }) }).process!.apparmorProfile, undefined);
    const unconfined = containerConfig({ linux: { securityContext: { apparmor: { profileType: T.Unconfined } } } });
    assert.equal(build({ settings, config: unconfined }).process!.apparmorProfile, undefined);
    assert.equal(build().process!.apparmorProfile, undefined, 'no AppArmor on the host: nothing in the spec');
  });
});

describe('the stove-default profile text', () => {
  const facts = (f: Partial<AppArmorProfileFacts> = {}): AppArmorProfileFacts => ({
    name: STOVE_APPARMOR_PROFILE,
    abi3: true,
    tunables: true,
    baseAbstraction: true,
    daemonProfile: 'unconfined',
    ...f,
  });
  /** The rule lines between the profile's braces, comments and blank lines left out. */
  const rules = (text: string) => {
    const body = text.slice(text.indexOf('{') + 1, text.lastIndexOf('}'));
    return body.split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  };

  it('has the rules containerd and CRI-O confine containers with', () => {
    const text = renderAppArmorProfile(facts());
    const r = rules(text);
    for (const rule of [
      'network,', 'capability,', 'file,', 'umount,',
      'deny @{PROC}/* w,',
      'deny @{PROC}/{[^1-9/],[^1-9/][^0-9/],[^1-9s/][^0-9y/][^0-9s/],[^1-9/][^0-9/][^0-9/][^0-9/]*}/** w,',
      'deny @{PROC}/sys/[^k]** w,',
      'deny @{PROC}/sys/kernel/{?,??,[^s][^h][^m]**} w,',
      'deny @{PROC}/sysrq-trigger rwklx,',
      'deny @{PROC}/kcore rwklx,',
      'deny mount,',
      'deny /sys/[^f]*/** wklx,', 'deny /sys/f[^s]*/** wklx,', 'deny /sys/fs/[^c]*/** wklx,', 'deny /sys/fs/c[^g]*/** wklx,', 'deny /sys/fs/cg[^r]*/** wklx,',
      'deny /sys/firmware/** rwklx,',
      'deny /sys/devices/virtual/powercap/** rwklx,',
      'deny /sys/kernel/security/** rwklx,',
      'signal (receive) peer=unconfined,', 'signal (receive) peer=runc,', 'signal (receive) peer=crun,',
      'signal (send,receive) peer=stove-default,',
      'ptrace (trace,tracedby,read,readby) peer=stove-default,',
    ]) {
      assert.ok(r.includes(rule), `missing: ${rule}`);
    }
    assert.ok(!r.some((l) => /^mount\b/.test(l) || /^ptrace,/.test(l) || /^signal,/.test(l)), 'no blanket mount, ptrace or signal rule');
    assert.ok(r.every((l) => l.endsWith(',')), 'every rule ends with a comma');
    assert.match(text, /^abi <abi\/3\.0>,$/m);
    assert.match(text, /^#include <tunables\/global>$/m);
    assert.match(text, /^profile stove-default flags=\(attach_disconnected,mediate_deleted\) \{$/m);
    assert.match(text, /^ {2}#include <abstractions\/base>$/m);
    assert.equal(text.match(/^profile .*\{$/gm)?.length, 1, 'one profile');
    assert.ok(text.trimEnd().endsWith('}'));
  });

  it('stands alone where the policy files are missing', () => {
    const text = renderAppArmorProfile(facts({ abi3: false, tunables: false, baseAbstraction: false }));
    assert.doesNotMatch(text, /abi </);
    assert.doesNotMatch(text, /#include/);
    assert.match(text, /^@\{PROC\}=\/proc\/$/m, 'defines the variable tunables/global would');
  });

  it('lets a confined daemon signal its containers, and takes another name', () => {
    assert.ok(rules(renderAppArmorProfile(facts({ daemonProfile: 'stove-daemon' }))).includes('signal (receive) peer=stove-daemon,'));
    assert.equal(rules(renderAppArmorProfile(facts())).filter((l) => l.startsWith('signal (receive)')).length, 3, 'nothing more for an unconfined daemon');
    const other = renderAppArmorProfile(facts({ name: 'site-default' }));
    assert.match(other, /^profile site-default flags/m);
    assert.ok(rules(other).includes('ptrace (trace,tracedby,read,readby) peer=site-default,'));
    assert.throws(() => renderAppArmorProfile(facts({ name: 'bad name' })), /not a plain AppArmor profile name/);
    assert.throws(() => renderAppArmorProfile(facts({ name: 'x,\n  mount' })), /not a plain AppArmor profile name/);
  });
});

describe('AppArmor names and the kernel files', () => {
  it('reads the daemon profile from /proc/self/attr/current', () => {
    assert.equal(daemonProfileFrom('unconfined\n'), 'unconfined');
    assert.equal(daemonProfileFrom(''), 'unconfined');
    assert.equal(daemonProfileFrom('stove-daemon (enforce)\n'), 'stove-daemon');
    assert.equal(daemonProfileFrom('/usr/bin/stove (complain)\0'), '/usr/bin/stove');
    assert.equal(daemonProfileFrom('we{ird} (enforce)'), 'unconfined', 'a name with glob characters adds no rule');
  });

  it('finds a profile and its mode in the profiles list', () => {
    const list = 'stove-default (enforce)\nstove-default-old (complain)\n/usr/bin/man (enforce)\nrunc (unconfined)\n';
    assert.equal(appArmorModeIn(list, 'stove-default'), 'enforce');
    assert.equal(appArmorModeIn(list, 'stove-default-old'), 'complain');
    assert.equal(appArmorModeIn(list, '/usr/bin/man'), 'enforce');
    assert.equal(appArmorModeIn(list, 'stove'), undefined, 'a prefix is not a match');
    assert.equal(appArmorModeIn(list, 'missing'), undefined);
    assert.equal(appArmorModeIn('', 'stove-default'), undefined);
  });

  it('knows a plain profile name', () => {
    for (const ok of ['stove-default', 'site_default.v2', '/usr/bin/stove', 'a:b+c']) assert.ok(isPlainProfileName(ok), ok);
    for (const bad of ['', 'two words', 'glob*', 'x{y}', 'q"uote', 'a//b', '-leading', 'x'.repeat(256), 'new\nline']) assert.ok(!isPlainProfileName(bad), JSON.stringify(bad));
  });

  it('config: runtime.apparmor_default_profile is stove-default, unconfined or a plain name', () => {
    assert.equal(defaultConfig().runtime.apparmorDefaultProfile, 'stove-default');
    assert.equal(parseConfig('[runtime]\napparmor_default_profile = "unconfined"\n', 'test.toml').runtime.apparmorDefaultProfile, 'unconfined');
    assert.equal(parseConfig('[runtime]\napparmor_default_profile = "site-default"\n', 'test.toml').runtime.apparmorDefaultProfile, 'site-default');
    for (const bad of ['', 'two words', 'x,\\n mount']) {
      assert.throws(() => parseConfig(`[runtime]\napparmor_default_profile = "${bad}"\n`, 'test.toml'), /test\.toml: "runtime\.apparmor_default_profile" must be "stove-default", "unconfined" or the name of a loaded AppArmor profile/);
    }
  });
});
