/**
 * The built-in default validator: the rules of containerd/nri's `plugins/default-validator` (which
 * containerd 2.4 and CRI-O 1.36 build in), judged in-process on the same ValidateContainerAdjustment
 * request external validators get. It takes part as the plugin `00-default-validator`: it is listed
 * among the plugins consulted (so required plugins and other validators see it) and its rejection
 * reads like any validator's, `validator "00-default-validator" rejected container adjustment, reason: …`.
 *
 * The rules, each off unless configured (`[nri.default_validator]`, containerd's key names):
 * - OCI hooks: no plugin may add hooks;
 * - seccomp: no plugin may replace the filter of a container whose CRI profile is RuntimeDefault,
 *   Unconfined (no profile and privileged count as unconfined) or Localhost, one switch each;
 * - namespaces: no plugin may add, replace or remove one;
 * - sysctls: no plugin may set one;
 * - required plugins: the plugins listed in the config and in the pod's
 *   `required-plugins.noderesource.dev` annotation (a YAML list; `/container.<name>` and `/pod`
 *   scoped forms as NRI reads them) must all have been consulted, unless the pod carries the
 *   configured toleration annotation set to true.
 * They are checked in upstream's order (hooks, seccomp, namespaces, required plugins, sysctls); the
 * first broken rule is the reason.
 */
import { parse as parseYaml } from 'yaml';
import type { NriDefaultValidatorConfig } from '../config/schema.js';
import { Field, SecurityProfile_ProfileType, type PodSandbox, type ValidateContainerAdjustmentRequest } from '../gen/nri/api.js';

/** How the built-in validator is named among plugins. */
export const DEFAULT_VALIDATOR = { name: 'default-validator', index: '00' } as const;

/** NRI's annotation listing extra required plugins (plugin.RequiredPluginsAnnotation). */
export const REQUIRED_PLUGINS_ANNOTATION = 'required-plugins.noderesource.dev';

/** Bound on the required-plugins annotation we parse (it is a pod annotation: hostile). */
const MAX_ANNOTATION_BYTES = 16 * 1024;

/** The reason the default rules reject this adjustment, or undefined when they accept it. */
export function defaultValidatorVerdict(cfg: NriDefaultValidatorConfig, req: ValidateContainerAdjustmentRequest): string | undefined {
  const checks = [hooks, seccomp, namespaces, requiredPlugins, sysctls];
  for (const check of checks) {
    const reason = check(cfg, req);
    if (reason) return reason;
  }
  return undefined;
}

function ownersOf(req: ValidateContainerAdjustmentRequest) {
  return req.owners?.owners[req.container?.id ?? ''];
}

const quoteList = (plugins: string) => (plugins.includes(',') ? `plugins "${plugins}"` : `plugin "${plugins}"`);

function hooks(cfg: NriDefaultValidatorConfig, req: ValidateContainerAdjustmentRequest): string | undefined {
  if (!req.adjust || !cfg.rejectOciHookAdjustment) return undefined;
  const owners = ownersOf(req)?.simple[Field.OciHooks];
  if (!owners) return undefined;
  return `validation error: ${quoteList(owners)} attempted restricted OCI hook injection`;
}

function seccomp(cfg: NriDefaultValidatorConfig, req: ValidateContainerAdjustmentRequest): string | undefined {
  if (!req.adjust) return undefined;
  const owner = ownersOf(req)?.simple[Field.SeccompPolicy];
  if (!owner) return undefined;
  const kind = req.container?.linux?.seccompProfile?.profileType ?? SecurityProfile_ProfileType.UNCONFINED;
  if (kind === SecurityProfile_ProfileType.UNCONFINED && cfg.rejectUnconfinedSeccompAdjustment)
    return `validation error: plugin "${owner}" attempted restricted unconfined seccomp policy adjustment`;
  if (kind === SecurityProfile_ProfileType.RUNTIME_DEFAULT && cfg.rejectRuntimeDefaultSeccompAdjustment)
    return `validation error: plugin "${owner}" attempted restricted runtime default seccomp policy adjustment`;
  if (kind === SecurityProfile_ProfileType.LOCALHOST && cfg.rejectCustomSeccompAdjustment)
    return `validation error: plugin "${owner}" attempted restricted custom seccomp policy adjustment`;
  return undefined;
}

function namespaces(cfg: NriDefaultValidatorConfig, req: ValidateContainerAdjustmentRequest): string | undefined {
  if (!req.adjust || !cfg.rejectNamespaceAdjustment) return undefined;
  const owners = ownersOf(req)?.compound[Field.Namespace]?.owners ?? {};
  const offenders = Object.entries(owners)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([ns, plugin]) => `"${plugin}" (namespace "${ns}")`);
  if (!offenders.length) return undefined;
  return `validation error: attempted restricted namespace adjustment by plugin(s) ${offenders.join(', ')}`;
}

function sysctls(cfg: NriDefaultValidatorConfig, req: ValidateContainerAdjustmentRequest): string | undefined {
  if (!req.adjust?.linux || !cfg.rejectSysctlAdjustment) return undefined;
  const owners = ownersOf(req)?.compound[Field.Sysctl]?.owners ?? {};
  const offenders = Object.keys(req.adjust.linux.sysctl)
    .sort()
    .filter((key) => owners[key])
    .map((key) => `"${owners[key]}" (sysctl "${key}")`);
  if (!offenders.length) return undefined;
  return `validation error: attempted restricted sysctl adjustment by plugin(s) ${offenders.join(', ')}`;
}

/** NRI's GetEffectiveAnnotation: `<key>/container.<name>`, then `<key>/pod`, then `<key>`. */
export function effectiveAnnotation(pod: PodSandbox | undefined, key: string, container: string): string | undefined {
  const annotations = pod?.annotations ?? {};
  for (const k of [`${key}/container.${container}`, `${key}/pod`, key]) {
    if (Object.hasOwn(annotations, k)) return annotations[k];
  }
  return undefined;
}

/** Go's strconv.ParseBool, which the upstream validator reads the toleration with. */
function parseGoBool(text: string): boolean | undefined {
  if (['1', 't', 'T', 'TRUE', 'true', 'True'].includes(text)) return true;
  if (['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(text)) return false;
  return undefined;
}

function requiredPlugins(cfg: NriDefaultValidatorConfig, req: ValidateContainerAdjustmentRequest): string | undefined {
  const container = req.container?.name ?? '';
  if (cfg.tolerateMissingPluginsAnnotation) {
    const value = effectiveAnnotation(req.pod, cfg.tolerateMissingPluginsAnnotation, container);
    if (value !== undefined) {
      const tolerate = parseGoBool(value);
      if (tolerate === undefined) return `invalid ${cfg.tolerateMissingPluginsAnnotation} annotation ${JSON.stringify(value)}: not true or false`;
      if (tolerate) return undefined;
    }
  }
  const required = [...cfg.requiredPlugins];
  const annotated = effectiveAnnotation(req.pod, REQUIRED_PLUGINS_ANNOTATION, container);
  if (annotated !== undefined) {
    const list = parseNameList(annotated);
    if (typeof list === 'string') return `invalid ${REQUIRED_PLUGINS_ANNOTATION} annotation ${JSON.stringify(annotated.slice(0, 200))}: ${list}`;
    required.push(...list);
  }
  if (!required.length) return undefined;
  const present = new Set(req.plugins.flatMap((p) => [p.name, `${p.index}-${p.name}`]));
  const missing = required.filter((r) => !present.has(r));
  if (!missing.length) return undefined;
  const offender = missing.length === 1 ? `required plugin "${missing[0]}"` : `required plugins "${missing.join(',')}"`;
  return `validation error: ${offender} not present`;
}

/** A YAML list of plugin names (`[a, b]` or a block list), or why it is not one. */
function parseNameList(text: string): string[] | string {
  if (Buffer.byteLength(text) > MAX_ANNOTATION_BYTES) return `longer than ${MAX_ANNOTATION_BYTES} bytes`;
  let value: unknown;
  try {
    value = parseYaml(text, { maxAliasCount: 0 });
  } catch (err) {
    return `not YAML (${(err as Error).message.split('\n')[0]})`;
  }
  if (value === null || value === undefined) return [];
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) return 'not a list of plugin names';
  return value;
}
