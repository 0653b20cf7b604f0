/**
 * Stove's configuration: the typed shape and every default, in one place.
 *
 * The TOML file mirrors this shape with snake_case keys:
 *
 *   socket = "/run/stove/stove.sock"
 *   [runtime]      runc, conmon, cgroup driver, capabilities, handlers
 *   [network]      CNI conf and bin dirs
 *   [streaming]    address and port of the exec/attach/port-forward server
 *   [images]       download concurrency, stall timeout
 *   [cdi]          CDI spec dirs
 *   [registries."host"]  mirrors, insecure, credentials per registry host
 *   [metrics]      Prometheus endpoint address (off when empty)
 *   [tracing]      OTLP/HTTP endpoint, sample ratio, service name (off when the endpoint is empty)
 *   [nri]          Node Resource Interface plugins (docs/nri.md)
 */
import type { LogLevel } from '../common/logger.js';

export type CgroupDriver = 'cgroupfs' | 'systemd';

/** An extra OCI runtime, selected by a pod's runtime_handler. */
export interface RuntimeHandlerConfig {
  /** Path of the OCI runtime binary (runc-compatible CLI). */
  path: string;
  /** Directory for the runtime's own state (`--root`). */
  root: string;
  /**
   * An image store of the handler's own (KEP-4216): the CRI image calls naming this handler pull, list
   * and remove images there, and its pods' containers run from there. Empty: the shared `<root>/images`.
   */
  imageStore: string;
}

export interface RuntimeConfig {
  runc: string;
  conmon: string;
  cgroupDriver: CgroupDriver;
  /** cgroup parent for pods that name none. */
  cgroupParent: string;
  /** Capabilities every container gets unless it drops them (containerd's list by default). */
  defaultCapabilities: string[];
  /** Seccomp profile for `RuntimeDefault`; empty means Stove's built-in profile. */
  seccompProfile: string;
  /**
   * On an AppArmor host, the profile containers asking for RuntimeDefault or for no profile run under:
   * `stove-default` (Stove's own, loaded by Stove at start), the name of a profile the node loads, or
   * `unconfined`. Privileged containers run unconfined whatever it is.
   */
  apparmorDefaultProfile: string;
  /** Extra runtime handlers by name; `runc` always exists and uses `runc` above. */
  handlers: Record<string, RuntimeHandlerConfig>;
  /** Bytes a container's CRI log may reach before conmon truncates it (`--log-size-max`); -1 = unlimited. */
  logSizeMax: number;
  /**
   * Rlimits for containers whose request sets none, CRI-O's `name=soft:hard` form
   * (`nofile=1048576:1048576`); see oci/ulimits.
   */
  defaultUlimits: string[];
  /** pids.max for containers whose request sets no pids limit; -1 = unlimited. */
  pidsLimit: number;
  /**
   * CRI annotations that reach the OCI spec (where runtimes, hooks and plugins read them): exact keys,
   * or prefixes ending in `*`. Others stay in Stove's records only (as containerd and CRI-O do).
   */
  allowedAnnotations: string[];
  /** `oci-hooks(5)` directories, in increasing priority (a file masks one of the same name before it). */
  hooksDirs: string[];
  /**
   * Directories CheckpointContainer may write archives to and CreateContainer may restore them from
   * (besides `<root>/checkpoints`, always allowed); the kubelet's by default.
   */
  checkpointDirs: string[];
  /**
   * What an image's declared `VOLUME`s get (docs/cri.md): `copy` (containerd's default) a writable
   * directory of the container's own holding the image's content there; `mkdir` (CRI-O's default) the
   * directory made in the root filesystem; `ignore` nothing.
   */
  imageVolumes: ImageVolumesMode;
  /** CRI devices owned by the container's runAsUser/runAsGroup instead of the host node's owner. */
  deviceOwnershipFromSecurityContext: boolean;
}

/** `runtime.image_volumes`. */
export type ImageVolumesMode = 'copy' | 'mkdir' | 'ignore';
export const IMAGE_VOLUMES_MODES: readonly ImageVolumesMode[] = ['copy', 'mkdir', 'ignore'];

export interface CdiConfig {
  /** CDI spec directories, in increasing priority (a later dir's device replaces an earlier one's). */
  specDirs: string[];
}

export interface NetworkConfig {
  cniConfDir: string;
  cniBinDirs: string[];
  /** Seconds one CNI plugin call may take. */
  cniTimeoutSeconds: number;
}

export interface StreamingConfig {
  /** Address the streaming HTTP server binds; loopback by default. */
  address: string;
  /** Port; 0 picks a free one. */
  port: number;
  /** Seconds a streaming URL stays valid. */
  tokenTtlSeconds: number;
  /** Seconds without traffic after which an exec/attach/port-forward connection is closed. */
  idleTimeoutSeconds: number;
  /** Open exec/attach/port-forward connections at most, over all containers and pods. */
  maxSessions: number;
  /** Open connections at most per container (exec, attach) or pod (port-forward). */
  maxSessionsPerContainer: number;
  /** Open streams at most on one connection (a port-forward connection uses two per TCP connection). */
  maxStreamsPerSession: number;
}

export interface ImagesConfig {
  /**
   * Images reported as pinned (the kubelet's image GC never removes them): exact references, or a
   * prefix ending in `*` (`registry.k8s.io/pause:*`), as CRI-O's `pinned_images`.
   */
  pinned: string[];
  maxConcurrentDownloads: number;
  /** A transfer with no bytes for this long fails. */
  stallTimeoutSeconds: number;
  /** Per-registry CAs and client certificates, Docker's layout (`<dir>/<host[:port]>/*.crt`, `*.cert` + `*.key`). */
  certsDirs: string[];
  /** A containers-policy.json(5) file every pull must satisfy; empty accepts every image. */
  signaturePolicy: string;
  /** Per-namespace policies, `<dir>/<pod namespace>.json`, used instead when present. */
  signaturePolicyDir: string;
  /** Bytes one layer may hold uncompressed (its tar stream); more fails the pull. */
  maxLayerSize: number;
  /** Bytes all layers of one image may hold uncompressed. */
  maxImageSize: number;
  /** Bytes that must stay free on the root's filesystem while layers are unpacked. */
  minFreeSpace: number;
  /**
   * Where containers' writable layers (overlay upper and work dirs) go, `<dir>/<container id>/`: a
   * filesystem of their own apart from the image store (KEP-4191's split image filesystem). Empty: beside
   * each container's record, `<root>/containers/<id>/fs/`, on the filesystem of the images.
   */
  writableLayersDir: string;
}

/** Per-registry settings, keyed by host (`docker.io`, `localhost:5000`). */
export interface RegistryConfig {
  /** Endpoints tried in order before the registry itself, e.g. `http://localhost:5000`. */
  mirrors: string[];
  /** Use plain http (and accept any TLS certificate) for this host. */
  insecure: boolean;
  username: string;
  password: string;
  /** base64 of `user:password`, as in a docker config.json. */
  auth: string;
  identityToken: string;
}

export interface MetricsConfig {
  /** `host:port` serving `/metrics`; empty turns metrics off. */
  address: string;
}

export interface TracingConfig {
  /** OTLP/HTTP collector, e.g. `http://127.0.0.1:4318`; empty turns tracing off. */
  endpoint: string;
  /** Share of traces started by Stove that are kept, 0–1 (a caller's sampling decision wins). */
  sampleRatio: number;
  serviceName: string;
}

/** NRI (docs/nri.md); key names and defaults as containerd's `[plugins."io.containerd.nri.v1.nri"]`. */
export interface NriConfig {
  enable: boolean;
  /** Where external plugins connect. */
  socketPath: string;
  /** Pre-launched plugins: executables named `<idx>-<name>`. */
  pluginPath: string;
  /** Their configs: `<idx>-<name>.conf` or `<name>.conf`. */
  pluginConfigPath: string;
  /** A duration such as "5s" or "500ms": how long a plugin has to register. */
  pluginRegistrationTimeout: string;
  /** A duration: how long a plugin has to answer one request. */
  pluginRequestTimeout: string;
  /** No socket for external plugins; only pre-launched ones run. */
  disableConnections: boolean;
  /** The built-in default validator (docs/nri.md "The default validator"); containerd 2.4's keys. */
  defaultValidator: NriDefaultValidatorConfig;
}

/**
 * What the built-in default validator rejects: the rules of containerd/nri's
 * `plugins/default-validator`, under containerd 2.4's key names. Everything off by default (as in
 * containerd 2.4 and CRI-O 1.36).
 */
export interface NriDefaultValidatorConfig {
  enable: boolean;
  /** Plugins may not add OCI hooks. */
  rejectOciHookAdjustment: boolean;
  /** Plugins may not replace the seccomp filter of a container whose CRI profile is RuntimeDefault. */
  rejectRuntimeDefaultSeccompAdjustment: boolean;
  /** … of an unconfined container (Unconfined, no profile, or privileged). */
  rejectUnconfinedSeccompAdjustment: boolean;
  /** … of a container with a Localhost profile. */
  rejectCustomSeccompAdjustment: boolean;
  /** Plugins may not add, replace or remove namespaces. */
  rejectNamespaceAdjustment: boolean;
  /** Plugins may not set sysctls. */
  rejectSysctlAdjustment: boolean;
  /** Plugins (by name, or `<idx>-<name>`) that must be running for any container to be created. */
  requiredPlugins: string[];
  /** A pod annotation key; `true` under it lets a pod's containers be created without the required plugins. */
  tolerateMissingPluginsAnnotation: string;
}

export interface Config {
  socket: string;
  root: string;
  state: string;
  logLevel: LogLevel;
  runtime: RuntimeConfig;
  network: NetworkConfig;
  streaming: StreamingConfig;
  images: ImagesConfig;
  cdi: CdiConfig;
  registries: Record<string, RegistryConfig>;
  metrics: MetricsConfig;
  tracing: TracingConfig;
  nri: NriConfig;
}

/** containerd's default capability set: what images built for Docker expect (ping, chroot, mknod). */
export const CONTAINERD_DEFAULT_CAPABILITIES = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FSETID',
  'CAP_FOWNER',
  'CAP_MKNOD',
  'CAP_NET_RAW',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETFCAP',
  'CAP_SETPCAP',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
  'CAP_KILL',
  'CAP_AUDIT_WRITE',
];

export const DEFAULT_CONFIG_PATH = '/etc/stove/stove.toml';
/** Drop-ins merged over the main file, in lexical order (as CRI-O's crio.conf.d). */
export const DEFAULT_CONFIG_DIR = '/etc/stove/stove.d';

/** Every default, in one place. */
export function defaultConfig(): Config {
  return {
    socket: '/run/stove/stove.sock',
    root: '/var/lib/stove',
    state: '/run/stove',
    logLevel: 'info',
    runtime: {
      runc: '/usr/bin/runc',
      conmon: '/usr/bin/conmon',
      cgroupDriver: 'cgroupfs',
      cgroupParent: '/kubepods',
      defaultCapabilities: [...CONTAINERD_DEFAULT_CAPABILITIES],
      seccompProfile: '',
      apparmorDefaultProfile: 'stove-default',
      handlers: {},
      logSizeMax: -1,
      defaultUlimits: [],
      pidsLimit: -1,
      allowedAnnotations: [],
      hooksDirs: ['/usr/share/containers/oci/hooks.d', '/etc/containers/oci/hooks.d'],
      checkpointDirs: ['/var/lib/kubelet/checkpoints'],
      imageVolumes: 'copy',
      deviceOwnershipFromSecurityContext: false,
    },
    network: {
      cniConfDir: '/etc/cni/net.d',
      cniBinDirs: ['/opt/cni/bin', '/usr/lib/cni'],
      cniTimeoutSeconds: 60,
    },
    streaming: {
      address: '127.0.0.1',
      port: 0,
      tokenTtlSeconds: 60,
      idleTimeoutSeconds: 4 * 60 * 60,
      maxSessions: 1024,
      maxSessionsPerContainer: 64,
      maxStreamsPerSession: 256,
    },
    images: {
      pinned: [],
      maxConcurrentDownloads: 3,
      stallTimeoutSeconds: 60,
      certsDirs: ['/etc/stove/certs.d', '/etc/containers/certs.d', '/etc/docker/certs.d'],
      signaturePolicy: '',
      signaturePolicyDir: '',
      maxLayerSize: 32 * 1024 ** 3,
      maxImageSize: 64 * 1024 ** 3,
      minFreeSpace: 1024 ** 3,
      writableLayersDir: '',
    },
    cdi: {
      specDirs: ['/etc/cdi', '/var/run/cdi'],
    },
    registries: {},
    metrics: { address: '' },
    tracing: { endpoint: '', sampleRatio: 1, serviceName: 'stove' },
    nri: {
      enable: true,
      socketPath: '/var/run/nri/nri.sock',
      pluginPath: '/opt/nri/plugins',
      pluginConfigPath: '/etc/nri/conf.d',
      pluginRegistrationTimeout: '5s',
      pluginRequestTimeout: '2s',
      disableConnections: false,
      defaultValidator: {
        enable: false,
        rejectOciHookAdjustment: false,
        rejectRuntimeDefaultSeccompAdjustment: false,
        rejectUnconfinedSeccompAdjustment: false,
        rejectCustomSeccompAdjustment: false,
        rejectNamespaceAdjustment: false,
        rejectSysctlAdjustment: false,
        requiredPlugins: [],
        tolerateMissingPluginsAnnotation: '',
      },
    },
  };
}

/** "1.5s", "500ms", "2m" → milliseconds; undefined for anything else. */
export function durationMs(text: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(text.trim());
  if (!m) return undefined;
  const n = Number(m[1]) * { ms: 1, s: 1000, m: 60_000 }[m[2] as 'ms' | 's' | 'm'];
  return n > 0 ? Math.round(n) : undefined;
}

/** Defaults for one `[registries."host"]` table. */
export function defaultRegistryConfig(): RegistryConfig {
  return { mirrors: [], insecure: false, username: '', password: '', auth: '', identityToken: '' };
}
