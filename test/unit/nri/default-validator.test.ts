/**
 * The built-in default validator's rules on hand-built ValidateContainerAdjustment requests: each rule
 * on and off, the seccomp rule by the CRI's profile kind, required plugins from the config and the
 * pod's annotations (scoped as NRI reads them), the toleration, and hostile annotations.
 */
import assert from 'node:assert/strict';
import { defaultConfig } from '../../../src/config/schema.js';
import type { NriDefaultValidatorConfig } from '../../../src/config/schema.js';
import { Field, SecurityProfile_ProfileType, ValidateContainerAdjustmentRequest, type FieldOwners } from '../../../src/gen/nri/api.js';
import { defaultValidatorVerdict, effectiveAnnotation, REQUIRED_PLUGINS_ANNOTATION } from '../../../src/nri/default-validator.js';

const TOLERATE = 'tolerate-missing-nri-plugins.noderesource.dev';

function rules(over: Partial<NriDefaultValidatorConfig> = {}): NriDefaultValidatorConfig {
  return { ...defaultConfig().nri.defaultValidator, enable: true, ...over };
}

/** A request for container c1 ("app") whose adjustment is `adjust`, with `owners` as NRI's field owners. */
function request(o: {
  owners?: FieldOwners;
  sysctl?: Record<string, string>;
  seccomp?: SecurityProfile_ProfileType;
  annotations?: Record<string, string>;
  plugins?: string[];
}): ValidateContainerAdjustmentRequest {
  return ValidateContainerAdjustmentRequest.fromPartial({
    pod: { id: 'pod1', name: 'p', annotations: o.annotations ?? {} },
    container: { id: 'c1', name: 'app', linux: o.seccomp === undefined ? {} : { seccompProfile: { profileType: o.seccomp, localhostRef: '' } } },
    adjust: { linux: { sysctl: o.sysctl ?? {} } },
    owners: { owners: { c1: o.owners ?? { simple: {}, compound: {} } } },
    plugins: (o.plugins ?? ['10-recorder']).map((p) => ({ index: p.slice(0, 2), name: p.slice(3) })),
  });
}

describe('nri default validator', () => {
  it('accepts everything when no rule is on', () => {
    const req = request({
      owners: { simple: { [Field.OciHooks]: '10-a', [Field.SeccompPolicy]: '10-a' }, compound: { [Field.Namespace]: { owners: { network: '10-a' } }, [Field.Sysctl]: { owners: { 'net.core.somaxconn': '10-a' } } } },
      sysctl: { 'net.core.somaxconn': '1024' },
      seccomp: SecurityProfile_ProfileType.RUNTIME_DEFAULT,
    });
    assert.equal(defaultValidatorVerdict(rules(), req), undefined);
  });

  it('rejects OCI hooks, naming every plugin that added some', () => {
    const one = request({ owners: { simple: { [Field.OciHooks]: '10-a' }, compound: {} } });
    assert.equal(defaultValidatorVerdict(rules({ rejectOciHookAdjustment: true }), one), 'validation error: plugin "10-a" attempted restricted OCI hook injection');
    const two = request({ owners: { simple: { [Field.OciHooks]: '10-a,20-b' }, compound: {} } });
    assert.equal(defaultValidatorVerdict(rules({ rejectOciHookAdjustment: true }), two), 'validation error: plugins "10-a,20-b" attempted restricted OCI hook injection');
    assert.equal(defaultValidatorVerdict(rules({ rejectOciHookAdjustment: true }), request({})), undefined, 'no hooks, nothing to reject');
  });

  it('judges a seccomp adjustment by the profile the CRI asked for', () => {
    const owners = { simple: { [Field.SeccompPolicy]: '10-a' }, compound: {} };
    const kinds = [
      [SecurityProfile_ProfileType.RUNTIME_DEFAULT, 'rejectRuntimeDefaultSeccompAdjustment', 'runtime default'],
      [SecurityProfile_ProfileType.UNCONFINED, 'rejectUnconfinedSeccompAdjustment', 'unconfined'],
      [SecurityProfile_ProfileType.LOCALHOST, 'rejectCustomSeccompAdjustment', 'custom'],
    ] as const;
    for (const [kind, key, words] of kinds) {
      const req = request({ owners, seccomp: kind });
      assert.equal(defaultValidatorVerdict(rules({ [key]: true }), req), `validation error: plugin "10-a" attempted restricted ${words} seccomp policy adjustment`);
      // The other two switches leave this kind alone.
      const others = Object.fromEntries(kinds.filter(([, k]) => k !== key).map(([, k]) => [k, true]));
      assert.equal(defaultValidatorVerdict(rules(others), req), undefined, `${words}: only its own switch rejects`);
    }
    // No profile described counts as unconfined (NRI's rule).
    assert.match(defaultValidatorVerdict(rules({ rejectUnconfinedSeccompAdjustment: true }), request({ owners })) ?? '', /unconfined seccomp/);
  });

  it('rejects namespace adjustments, naming each namespace and its plugin in a stable order', () => {
    const req = request({ owners: { simple: {}, compound: { [Field.Namespace]: { owners: { pid: '20-b', network: '10-a' } } } } });
    assert.equal(
      defaultValidatorVerdict(rules({ rejectNamespaceAdjustment: true }), req),
      'validation error: attempted restricted namespace adjustment by plugin(s) "10-a" (namespace "network"), "20-b" (namespace "pid")',
    );
  });

  it('rejects sysctl adjustments, naming each sysctl and its plugin; a removal is no claim', () => {
    const req = request({ sysctl: { 'net.core.somaxconn': '1024', '-kernel.shm_rmid_forced': '' }, owners: { simple: {}, compound: { [Field.Sysctl]: { owners: { 'net.core.somaxconn': '10-a' } } } } });
    assert.equal(defaultValidatorVerdict(rules({ rejectSysctlAdjustment: true }), req), 'validation error: attempted restricted sysctl adjustment by plugin(s) "10-a" (sysctl "net.core.somaxconn")');
    const removal = request({ sysctl: { '-kernel.shm_rmid_forced': '' } });
    assert.equal(defaultValidatorVerdict(rules({ rejectSysctlAdjustment: true }), removal), undefined);
  });

  it('checks in upstream order: hooks before namespaces before sysctls', () => {
    const req = request({
      sysctl: { 'net.core.somaxconn': '1024' },
      owners: { simple: { [Field.OciHooks]: '30-c' }, compound: { [Field.Namespace]: { owners: { network: '10-a' } }, [Field.Sysctl]: { owners: { 'net.core.somaxconn': '10-a' } } } },
    });
    const all = rules({ rejectOciHookAdjustment: true, rejectNamespaceAdjustment: true, rejectSysctlAdjustment: true });
    assert.match(defaultValidatorVerdict(all, req)!, /OCI hook/);
    assert.match(defaultValidatorVerdict({ ...all, rejectOciHookAdjustment: false }, req)!, /namespace/);
    assert.match(defaultValidatorVerdict({ ...all, rejectOciHookAdjustment: false, rejectNamespaceAdjustment: false }, req)!, /sysctl/);
  });

  it('requires the configured plugins by name or <idx>-<name>', () => {
    const req = request({ plugins: ['00-default-validator', '10-recorder'] });
    assert.equal(defaultValidatorVerdict(rules({ requiredPlugins: ['recorder', '10-recorder'] }), req), undefined);
    assert.equal(defaultValidatorVerdict(rules({ requiredPlugins: ['20-recorder'] }), req), 'validation error: required plugin "20-recorder" not present');
    assert.equal(defaultValidatorVerdict(rules({ requiredPlugins: ['a', 'recorder', 'b'] }), req), 'validation error: required plugins "a,b" not present');
  });

  it('adds the plugins of the pod annotation, the container-scoped one first, then /pod, then the bare key', () => {
    const annotations = {
      [`${REQUIRED_PLUGINS_ANNOTATION}/container.app`]: '["from-container"]',
      [`${REQUIRED_PLUGINS_ANNOTATION}/pod`]: '- from-pod-scope',
      [REQUIRED_PLUGINS_ANNOTATION]: '[from-pod]',
    };
    assert.equal(defaultValidatorVerdict(rules(), request({ annotations })), 'validation error: required plugin "from-container" not present');
    const { [`${REQUIRED_PLUGINS_ANNOTATION}/container.app`]: _c, ...podScoped } = annotations;
    assert.equal(defaultValidatorVerdict(rules(), request({ annotations: podScoped })), 'validation error: required plugin "from-pod-scope" not present');
    assert.equal(effectiveAnnotation(request({ annotations: { [REQUIRED_PLUGINS_ANNOTATION]: 'x' } }).pod, REQUIRED_PLUGINS_ANNOTATION, 'app'), 'x');
    // Another container's annotation does not apply.
    assert.equal(defaultValidatorVerdict(rules(), request({ annotations: { [`${REQUIRED_PLUGINS_ANNOTATION}/container.other`]: '[x]' } })), undefined);
  });

  it('lets the toleration annotation (Go booleans) waive required plugins; anything else is an error', () => {
    const cfg = rules({ requiredPlugins: ['policy'], tolerateMissingPluginsAnnotation: TOLERATE });
    assert.match(defaultValidatorVerdict(cfg, request({}))!, /required plugin "policy" not present/);
    for (const yes of ['true', 'True', '1', 't']) assert.equal(defaultValidatorVerdict(cfg, request({ annotations: { [TOLERATE]: yes } })), undefined, yes);
    assert.match(defaultValidatorVerdict(cfg, request({ annotations: { [`${TOLERATE}/container.app`]: 'false', [TOLERATE]: 'true' } }))!, /not present/, 'the container scope wins');
    assert.equal(defaultValidatorVerdict(cfg, request({ annotations: { [TOLERATE]: 'yes' } })), `invalid ${TOLERATE} annotation "yes": not true or false`);
    // Without a configured key the annotation means nothing.
    assert.match(defaultValidatorVerdict(rules({ requiredPlugins: ['policy'] }), request({ annotations: { [TOLERATE]: 'true' } }))!, /not present/);
  });

  it('refuses a required-plugins annotation that is not a bounded YAML list of names', () => {
    const verdict = (value: string) => defaultValidatorVerdict(rules(), request({ annotations: { [REQUIRED_PLUGINS_ANNOTATION]: value } }));
    assert.match(verdict('just-a-name')!, /invalid required-plugins\.noderesource\.dev annotation "just-a-name": not a list of plugin names/);
    assert.match(verdict('[a, [b]]')!, /not a list of plugin names/);
    assert.match(verdict('[unclosed')!, /not YAML/);
    assert.equal(verdict('&a [x]\n'), 'validation error: required plugin "x" not present', 'an anchor alone is plain YAML');
    assert.match(verdict('- x\n'.repeat(10_000))!, /longer than 16384 bytes/);
    // Aliases are not resolved (no expansion of a hostile annotation): the annotation is refused.
    assert.match(verdict('- &x a\n- *x\n')!, /not YAML \(Alias resolution is disabled\)/);
    assert.equal(verdict(''), undefined, 'an empty annotation requires nothing');
  });
});
