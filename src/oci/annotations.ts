/**
 * OCI annotations Stove writes into every config.json: the CRI's own annotations, then the
 * `io.kubernetes.cri.*` keys containerd uses (`pkg/cri/annotations`), which runtimes and hooks such as
 * gVisor/Kata or NRI plugins read. The `io.kubernetes.cri.*` keys are written last so a request cannot
 * spoof them. A request's own annotations reach the spec only when `runtime.allowed_annotations` lists
 * them (as containerd's `pod_annotations` and CRI-O's `allowed_annotations`): runtimes and hooks act on
 * spec annotations, and whoever may create a pod must not thereby configure them.
 */
import type { SpecOpt } from './opts.js';

export const ANNOTATIONS = {
  /** `sandbox` for the pause container, `container` for app containers. */
  containerType: 'io.kubernetes.cri.container-type',
  sandboxId: 'io.kubernetes.cri.sandbox-id',
  sandboxName: 'io.kubernetes.cri.sandbox-name',
  sandboxNamespace: 'io.kubernetes.cri.sandbox-namespace',
  sandboxUid: 'io.kubernetes.cri.sandbox-uid',
  sandboxLogDirectory: 'io.kubernetes.cri.sandbox-log-directory',
  containerName: 'io.kubernetes.cri.container-name',
  imageName: 'io.kubernetes.cri.image-name',
} as const;

export const CONTAINER_TYPE_SANDBOX = 'sandbox';
export const CONTAINER_TYPE_CONTAINER = 'container';

/** Pod identity as the kubelet gives it (PodSandboxMetadata). */
export interface PodIdentity {
  sandboxId: string;
  name: string;
  namespace: string;
  uid: string;
}

/** Whether `key` matches an allowlist entry: the exact key, or a prefix written with a trailing `*`. */
export function annotationAllowed(key: string, allowed: readonly string[]): boolean {
  return allowed.some((a) => (a.endsWith('*') ? key.startsWith(a.slice(0, -1)) : key === a));
}

/** Sets the annotations: those of `base` (from the CRI request) on the allowlist, then the fixed CRI keys. */
export const withCriAnnotations = (base: Record<string, string>, cri: Record<string, string>, allowed: readonly string[] = []): SpecOpt => (spec) => {
  const passed = Object.entries(base).filter(([key]) => annotationAllowed(key, allowed));
  spec.annotations = { ...Object.fromEntries(passed), ...cri };
};

/** The fixed keys for an app container. */
export function containerAnnotations(pod: PodIdentity, containerName: string, imageName: string): Record<string, string> {
  return {
    [ANNOTATIONS.containerType]: CONTAINER_TYPE_CONTAINER,
    [ANNOTATIONS.sandboxId]: pod.sandboxId,
    [ANNOTATIONS.sandboxName]: pod.name,
    [ANNOTATIONS.sandboxNamespace]: pod.namespace,
    [ANNOTATIONS.sandboxUid]: pod.uid,
    [ANNOTATIONS.containerName]: containerName,
    [ANNOTATIONS.imageName]: imageName,
  };
}

/** The fixed keys for the pause container. */
export function sandboxAnnotations(pod: PodIdentity, logDirectory: string, imageName: string): Record<string, string> {
  return {
    [ANNOTATIONS.containerType]: CONTAINER_TYPE_SANDBOX,
    [ANNOTATIONS.sandboxId]: pod.sandboxId,
    [ANNOTATIONS.sandboxName]: pod.name,
    [ANNOTATIONS.sandboxNamespace]: pod.namespace,
    [ANNOTATIONS.sandboxUid]: pod.uid,
    [ANNOTATIONS.sandboxLogDirectory]: logDirectory,
    [ANNOTATIONS.imageName]: imageName,
  };
}
