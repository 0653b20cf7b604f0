/**
 * The narrow calls the rest of Stove makes to report what it does: metrics and trace spans. Until
 * `[metrics]` or `[tracing]` turns one on (start.ts installs the real ones), they do nothing, so an
 * idle daemon with both off loads neither prom-client nor OpenTelemetry.
 *
 * This is Stove's one registry object for process-wide state (docs/architecture.md, "Process-wide
 * state"): the recorder and tracer are installed once, by observability/start.ts at start-up (tests
 * install fakes with installObservability), and read through metrics() and tracer() where an event
 * happens, instead of being passed through every constructor between daemon.ts and that place.
 */

/** How an ExecSync ended, for `stove_exec_sync_total{result}`. */
export type ExecSyncResult = 'ok' | 'nonzero_exit' | 'timeout' | 'error';

/** What the daemon counts and times (metrics.ts implements it with prom-client). */
export interface MetricsRecorder {
  /** One finished CRI call; `seconds` is absent for server-streaming calls (their length is the client's). */
  criRequest(method: string, code: string, seconds?: number): void;
  /** A RunPodSandbox that succeeded, with its step timings in milliseconds. */
  podSandboxStarted(seconds: number, stepsMs: Readonly<Record<string, number>>): void;
  containerCreated(id: string, seconds: number): void;
  containerStarted(id: string, seconds: number): void;
  imagePull(result: 'success' | 'failure', seconds: number): void;
  imagePullBytes(bytes: number): void;
  layerUnpacked(seconds: number): void;
  execSync(result: ExecSyncResult): void;
  containerOom(): void;
  recovered(seconds: number): void;
}

export type SpanAttributes = Record<string, string | number | boolean>;

/** Reads one gRPC metadata value, for the W3C trace context a kubelet sends. */
export type MetadataGetter = (key: string) => string | undefined;

/** Trace spans (tracing.ts implements it with the OpenTelemetry SDK). */
export interface Tracer {
  /** Runs a CRI call in a server span named `method`, a child of the caller's `traceparent` if any. */
  serverCall<T>(method: string, metadata: MetadataGetter, attributes: SpanAttributes, body: () => Promise<T>): Promise<T>;
  /** Runs `body` in a child span of the current one; a throw is recorded on the span. */
  span<T>(name: string, attributes: SpanAttributes, body: () => Promise<T>): Promise<T>;
  /** A step that already ran (from `performance.now()` marks), as a child span of the current one. */
  step(name: string, startedMs: number, endedMs: number): void;
  /** Adds attributes to the current span (e.g. the ID a create returns). */
  annotate(attributes: SpanAttributes): void;
}

const noop = (): void => {};

export const NO_METRICS: MetricsRecorder = {
  criRequest: noop,
  podSandboxStarted: noop,
  containerCreated: noop,
  containerStarted: noop,
  imagePull: noop,
  imagePullBytes: noop,
  layerUnpacked: noop,
  execSync: noop,
  containerOom: noop,
  recovered: noop,
};

export const NO_TRACING: Tracer = {
  serverCall: (_method, _metadata, _attributes, body) => body(),
  span: (_name, _attributes, body) => body(),
  step: noop,
  annotate: noop,
};

let currentMetrics: MetricsRecorder = NO_METRICS;
let currentTracer: Tracer = NO_TRACING;

/** The recorder in use (a no-op unless metrics are on). */
export function metrics(): MetricsRecorder {
  return currentMetrics;
}

/** The tracer in use (a no-op unless tracing is on). */
export function tracer(): Tracer {
  return currentTracer;
}

/** Installs a recorder and a tracer for the whole process (start.ts, and tests with fakes). */
export function installObservability(recorder: MetricsRecorder, t: Tracer): void {
  currentMetrics = recorder;
  currentTracer = t;
}
